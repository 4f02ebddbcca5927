"""Test fixture: a plugin module that cannot be imported."""

import graphpass_module_that_does_not_exist  # noqa: F401
