"""Spark data sources for the broker (`sharebroker`, `sharegroup`), the `sharebroker pipeline`
jobs and the queue report. Needs the `spark` extra; see the README's "The Spark pipeline"."""
