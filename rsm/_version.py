"""The one place the release version is written: the package metadata (pyproject's dynamic version), the shim
jar's manifest (jvm-shim/build.sh reads this line) and ``kts --version`` all take it from here."""

__version__ = "0.2.0"
