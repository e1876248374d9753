"""The SDK's version, kept apart so every module can import it without cycles.

jupyter_ext/package.json holds the project's one version string; the build copies it into
the package metadata, which is read here.
"""

from importlib.metadata import version

__version__ = version("devboxes")
