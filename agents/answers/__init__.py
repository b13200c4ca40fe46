"""The worker's answers, split by job: one read path for the API and the Prometheus export.

* :mod:`.request` -- a request's parameters parsed and checked (a 400 naming the bad one);
* :mod:`.service` -- the estimate service: estimates, top-K, trends and parameters from the counts view,
  no HTTP; the Prometheus export reads a window through :meth:`.service.EstimateService.window_estimate`,
  the same path as /estimates and /topk;
* :mod:`.privacy` -- what a window's answer may claim: withheld windows, the central epsilon;
* :mod:`.encode` -- values by name, estimates as records, the JSON text of an answer;
* :mod:`.combined` -- ``version=combined``: every live version's estimates combined.
"""
