"""Reporting: what a run, a model and the registry look like to people and to tools.

* ``_render``: a run's report as text, JSON or SARIF;
* ``_summary``: a model's summary (``graphpass inspect``);
* ``_listings``: the tables of ``graphpass passes``, ``plan``
  and ``plugins``;
* ``_progress``: the progress display of long runs.
"""

from typing import TYPE_CHECKING

from graphpass._lazy import lazy_exports
from graphpass.reporting._render import ReportInfo, render_json, render_sarif, render_text
from graphpass.reporting._summary import model_summary, render_summary

if TYPE_CHECKING:
    from graphpass.reporting._listings import (
        clashes_data,
        passes_data,
        pipelines_data,
        plan_data,
        plugins_data,
        print_passes,
        print_plan,
        print_plugins,
    )
    from graphpass.reporting._progress import (
        FileProgress,
        PassProgress,
        StepProgress,
        loading,
    )
    from graphpass.reporting._render import (
        SarifModel,
        report_dict,
        sarif_log,
        summary_line,
    )
    from graphpass.reporting._training import (
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
    "FileProgress": "graphpass.reporting._progress",
    "PassProgress": "graphpass.reporting._progress",
    "SarifModel": "graphpass.reporting._render",
    "StepProgress": "graphpass.reporting._progress",
    "TrainingReport": "graphpass.reporting._training",
    "clashes_data": "graphpass.reporting._listings",
    "loading": "graphpass.reporting._progress",
    "passes_data": "graphpass.reporting._listings",
    "pipelines_data": "graphpass.reporting._listings",
    "plan_data": "graphpass.reporting._listings",
    "plugins_data": "graphpass.reporting._listings",
    "print_build_summary": "graphpass.reporting._training",
    "print_evaluation": "graphpass.reporting._training",
    "print_passes": "graphpass.reporting._listings",
    "print_plan": "graphpass.reporting._listings",
    "print_plugins": "graphpass.reporting._listings",
    "print_step": "graphpass.reporting._training",
    "print_training_summary": "graphpass.reporting._training",
    "report_dict": "graphpass.reporting._render",
    "sarif_log": "graphpass.reporting._render",
    "summary_line": "graphpass.reporting._render",
    "training_dict": "graphpass.reporting._training",
})
