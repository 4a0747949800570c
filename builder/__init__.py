"""repro's build side: manifest → observations → lock → sealed bundle, and verification."""
