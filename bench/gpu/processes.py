"""Write the process roles a smoke start showed into a manifest's [launch.processes].

    processes.py SMOKE_JSON MANIFEST

The roles are those repro's own audit gave each process of the live tree (builder/native/
roles.py); a role of "other" is printed, never declared. The manifest is rewritten only when
the roles differ from what it declares; what changed is printed.
"""

from __future__ import annotations

import json
import re
import sys
import tomllib
from pathlib import Path


def main() -> None:
    smoke, manifest = Path(sys.argv[1]), Path(sys.argv[2])
    roles = json.loads(smoke.read_text()).get("roles") or {}
    declared = {k: v for k, v in sorted(roles.items()) if k and k != "other"}
    if roles.get("other"):
        print(f"the smoke start had {roles['other']} process(es) of no role: not declared")
    if not declared:
        print("the smoke start showed no roles: the manifest is left as it is")
        return
    text = manifest.read_text()
    current = tomllib.loads(text)["launch"]["processes"]
    if current == declared:
        print(f"[launch.processes] already {declared}")
        return
    block = "[launch.processes]\n" + "".join(f"{k} = {v}\n" for k, v in declared.items())
    text = re.sub(r"\[launch\.processes\]\n(?:[a-z_]+ = \d+\n)+", block, text, count=1)
    manifest.write_text(text)
    print(f"[launch.processes] {current} -> {declared}, from the smoke start's audit")


if __name__ == "__main__":
    main()
