"""popkit report: the evidence log as an HTML dashboard (data -> charts -> html, tied together by dashboard)."""
