"""graphpass's own gradient builders, one module per operator family.

:func:`builtin_builders` lists them; the built-in plugin registers them through the
``graphpass_gradient_builders`` hook, as any plugin would.
"""

from __future__ import annotations

from graphpass.training._builder import GradientBuilder

__all__ = ["builtin_builders"]


def builtin_builders() -> list[GradientBuilder]:
    """Every built-in builder."""
    from graphpass.training._builders import (
        conv,
        elementwise,
        linear,
        loss,
        normalization,
        reduction,
        resize,
        shape,
        spectral,
    )

    return [*elementwise.BUILDERS, *linear.BUILDERS, *normalization.BUILDERS,
            *shape.BUILDERS, *reduction.BUILDERS, *conv.BUILDERS, *resize.BUILDERS,
            *spectral.BUILDERS, *loss.BUILDERS]
