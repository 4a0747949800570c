"""The sealed bundle: its layout, canonical statement, DSSE signature, keys, the sealer and the
integrity check that proves a bundle intact before anything reads it."""
