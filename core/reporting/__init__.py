"""Reporting: what a run, a model and the registry look like to people and to tools.

* :mod:`graphpass.reporting.render`: a run's report as text, JSON or SARIF;
* :mod:`graphpass.reporting.summary`: a model's summary (``graphpass inspect``);
* :mod:`graphpass.reporting.listings`: the tables of ``graphpass passes``, ``plan``
  and ``plugins``;
* :mod:`graphpass.reporting.progress`: the progress display of long runs.
"""

from graphpass.reporting.render import ReportInfo, render_json, render_sarif, render_text
from graphpass.reporting.summary import model_summary, render_summary

__all__ = ["ReportInfo", "model_summary", "render_json", "render_sarif", "render_summary",
           "render_text"]
