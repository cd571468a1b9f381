"""Static cost model: requests, bytes, forward passes and time of a script on NDIF.

Reads the same facts as the passes. (Download sizes and time come with the cost-model
issue; until then requests are counted exactly and the rest is zero.)
"""

from __future__ import annotations

from ndif_opt.analysis import Facts, Remote
from ndif_opt.options import Options
from ndif_opt.regions import requests_in, trip_count
from ndif_opt.types import Cost

UNKNOWN_TRIPS = 8  # iterations assumed for a loop whose length is not known statically


def estimate(facts: Facts, options: Options) -> Cost:
    requests = 0
    for block in facts.blocks:
        if block.parent is not None or not facts.is_remote(block.remote.state):
            continue
        count = 1
        for loop in block.stmt.loops():
            trips = trip_count(loop, facts)
            count *= UNKNOWN_TRIPS if trips is None else trips
        requests += count
    return Cost(requests=requests)


def assumptions(options: Options) -> list[str]:
    return [f"a loop of unknown length runs {UNKNOWN_TRIPS} times"]
