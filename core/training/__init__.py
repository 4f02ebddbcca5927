"""Training: what a trainer can differentiate, and the types gradients are checked with.

* :mod:`graphpass.training.gradient_rules`: :class:`GradientRules`, which
  ``(domain, op)`` a trainer differentiates and under which conditions;
* :mod:`graphpass.training.value_types`: element types and shapes of values, declared
  or inferred.
"""

from graphpass.training.gradient_rules import GradientRules

__all__ = ["GradientRules"]
