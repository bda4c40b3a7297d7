"""tally: aggregate numpy arrays on a tally server.

    import numpy as np, tally
    with tally.Client("localhost:50051") as c:
        r = c.aggregate(np.random.rand(10_000_000), ["sum", "std:1", "hist:256:0:1"])
        counts, edges = r["hist:256:0:1"]

numpy's reductions are Client methods with numpy's signatures and answers
(``c.nanstd(x, axis=0, ddof=1)``, ``c.histogram(x, 64)``,
``c.quantile(x, [0.5, 0.99], axis=1, method="hazen")``, ``c.median(x)``),
as are the k largest elements (``c.topk(x, 10)``, torch.topk's answer),
distinct counts (``c.count_distinct(x)``, ``c.approx_count_distinct(x)``)
and DDSketch quantiles (``c.ddsketch_quantile(x, 0.99)``);
``c.agg(df, ["mean", "median", "nunique"])`` answers what pandas' ``df.agg``
does, and ``c.groupby(df, "store", {"price": ["sum", "mean"]})`` what
``df.groupby("store").agg(...)`` does, each group aggregated by the server.

Partial states (:meth:`Client.partial`, :func:`merge`, :func:`finish`) let
the parts of an array be aggregated anywhere and combined on the client;
:mod:`tally.dask` does that, lazily, for Dask Arrays and DataFrames.
"""
from ._arrays import SUPPORTED as _SUPPORTED
from ._ops import Op, parse_ops
from ._values import Histogram
from ._results import Execution, Results
from .client import Client, DatasetInfo, Error, RegionInfo, SharedArray
from .partial import STATE_VERSION, Partial, empty, finish, merge, merge_all

#: The numpy dtypes tally aggregates.
SUPPORTED_DTYPES = tuple(_SUPPORTED)

__all__ = ["Client", "DatasetInfo", "Error", "Execution", "Histogram", "Op", "Partial", "RegionInfo", "Results",
           "SharedArray", "STATE_VERSION",
           "SUPPORTED_DTYPES", "empty", "finish", "merge", "merge_all", "parse_ops"]
