"""graphpass plugins: hook specifications, the plugin manager, built-in registrations.

Plugin authors need one name from here::

    from graphpass.plugins import hookimpl

    @hookimpl
    def graphpass_passes():
        return [MyPass]
"""

from graphpass.plugins.hookspecs import PROJECT_NAME, hookimpl, hookspec

__all__ = ["PROJECT_NAME", "hookimpl", "hookspec"]
