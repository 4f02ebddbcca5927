"""graphpass plugins: the built-in registrations and the plugins shipped with graphpass.

The hooks and the plugin loading are part of the framework
(``_hookspecs``, ``_plugin_loading``);
plugin authors need one name, re-exported here::

    from graphpass.plugins import hookimpl

    @hookimpl
    def graphpass_passes():
        return [MyPass]
"""

from graphpass.framework import PROJECT_NAME, hookimpl, hookspec

__all__ = ["PROJECT_NAME", "hookimpl", "hookspec"]
