"""CI: the versions pyproject.toml declares, as `OLDEST_PYTHON NEWEST_PYTHON OLDEST_NUMPY`: its
requires-python floor, the newest Python among its classifiers and its numpy floor.
Needs Python 3.11+ (tomllib)."""
import os
import re
import tomllib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main():
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        project = tomllib.load(f)["project"]
    oldest_python = re.fullmatch(r">=(3\.\d+)", project["requires-python"]).group(1)
    listed = [c.rsplit(" :: ", 1)[1] for c in project["classifiers"]
              if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)]
    newest_python = max(listed, key=lambda version: int(version.split(".")[1]))
    (numpy,) = [d for d in project["dependencies"] if re.match(r"numpy\b", d)]
    oldest_numpy = re.fullmatch(r"numpy>=([\d.]+)", numpy).group(1)
    print(oldest_python, newest_python, oldest_numpy)


if __name__ == "__main__":
    main()
