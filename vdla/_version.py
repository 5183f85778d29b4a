"""The package's one version string: ``vdla.__version__``, pyproject.toml's dynamic version and the artifact's
manifest all read it here (a module of its own, so that reading it imports nothing else)."""

__version__ = "0.1.0"
