"""Reporting: what a run, a model and the registry look like to people and to tools.

* :mod:`graphpass.reporting.render`: a run's report as text, JSON or SARIF;
* :mod:`graphpass.reporting.summary`: a model's summary (``graphpass inspect``);
* :mod:`graphpass.reporting.listings`: the tables of ``graphpass passes``, ``plan``
  and ``plugins``;
* :mod:`graphpass.reporting.progress`: the progress display of long runs.
"""

from typing import TYPE_CHECKING

from graphpass._lazy import lazy_exports
from graphpass.reporting.render import ReportInfo, render_json, render_sarif, render_text
from graphpass.reporting.summary import model_summary, render_summary

if TYPE_CHECKING:
    from graphpass.reporting.listings import (
        clashes_data,
        passes_data,
        pipelines_data,
        plan_data,
        plugins_data,
        print_passes,
        print_plan,
        print_plugins,
    )
    from graphpass.reporting.progress import (
        FileProgress,
        PassProgress,
        StepProgress,
        loading,
    )
    from graphpass.reporting.render import (
        SarifModel,
        report_dict,
        sarif_log,
        summary_line,
    )
    from graphpass.reporting.training import (
        TrainingReport,
        print_build_summary,
        print_evaluation,
        print_step,
        print_training_summary,
        training_dict,
    )

__all__ = [
    "FileProgress",
    "PassProgress",
    "ReportInfo",
    "SarifModel",
    "StepProgress",
    "TrainingReport",
    "clashes_data",
    "loading",
    "model_summary",
    "passes_data",
    "pipelines_data",
    "plan_data",
    "plugins_data",
    "print_build_summary",
    "print_evaluation",
    "print_passes",
    "print_plan",
    "print_plugins",
    "print_step",
    "print_training_summary",
    "render_json",
    "render_sarif",
    "render_summary",
    "render_text",
    "report_dict",
    "sarif_log",
    "summary_line",
    "training_dict",
]

__getattr__, __dir__ = lazy_exports(__name__, globals(), {
    "FileProgress": "graphpass.reporting.progress",
    "PassProgress": "graphpass.reporting.progress",
    "SarifModel": "graphpass.reporting.render",
    "StepProgress": "graphpass.reporting.progress",
    "TrainingReport": "graphpass.reporting.training",
    "clashes_data": "graphpass.reporting.listings",
    "loading": "graphpass.reporting.progress",
    "passes_data": "graphpass.reporting.listings",
    "pipelines_data": "graphpass.reporting.listings",
    "plan_data": "graphpass.reporting.listings",
    "plugins_data": "graphpass.reporting.listings",
    "print_build_summary": "graphpass.reporting.training",
    "print_evaluation": "graphpass.reporting.training",
    "print_passes": "graphpass.reporting.listings",
    "print_plan": "graphpass.reporting.listings",
    "print_plugins": "graphpass.reporting.listings",
    "print_step": "graphpass.reporting.training",
    "print_training_summary": "graphpass.reporting.training",
    "report_dict": "graphpass.reporting.render",
    "sarif_log": "graphpass.reporting.render",
    "summary_line": "graphpass.reporting.render",
    "training_dict": "graphpass.reporting.training",
})
