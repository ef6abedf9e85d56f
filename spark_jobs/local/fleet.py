"""A fleet's traffic as it really arrives: ``sigflow simulate --rate R`` without ``--events``.

Devices each send at a rate of their own (a few chatty, most quiet: weights drawn from a
lognormal), together ``rate`` events per second; each event is stamped with the wall clock
when it is made, so event time advances as real time does whatever the rate. The defects of
the seeded stream (``simulate.generate_events``) are mixed in at the same ratios: late events
30 to 60 minutes behind the clock, out-of-order ones up to 2 minutes behind, re-sent events,
malformed records. Alerts are interleaved with the events, one per ``alert_every`` valid
events, at that event's time (a share of them from silent devices, some malformed).

The seed fixes the fleet (its devices' rates, the order they send in, the defects); each
run's event and alert ids carry the run's start, so a fleet simulated again goes on with
ids of its own instead of re-sending the last run's (which dedup and the alert join would
drop as duplicates within the watermark).
"""

from __future__ import annotations

import itertools
import json
import random
import time
from dataclasses import dataclass
from typing import Callable, Iterator

from spark_jobs.local.simulate import RECENT, Defects, SimRecord

EVENT, ALERT = "event", "alert"  # which topic a record goes to


@dataclass(frozen=True)
class Fleet:
    rate: float  # events per second, the whole fleet
    devices: int = 500
    seed: int = 7
    late_ratio: float = 0.02
    out_of_order_ratio: float = 0.05
    duplicate_ratio: float = 0.02
    malformed_ratio: float = 0.005
    alert_every: int = 50
    silent_ratio: float = 0.3  # of alerts: from a device that sends no telemetry
    bad_alert_ratio: float = 0.05

    def device_rates(self) -> list[float]:
        """Events per second of each device (they add up to ``rate``)."""
        rng = random.Random(self.seed)
        weights = [rng.lognormvariate(0.0, 0.75) for _ in range(self.devices)]
        total = sum(weights)
        return [self.rate * weight / total for weight in weights]


def traffic(fleet: Fleet, clock: Callable[[], float] = time.time) -> Iterator[tuple[str, SimRecord]]:
    """The fleet's records in the order they are sent, each (EVENT or ALERT, record), made
    when asked for: its event time is ``clock()`` then, moved by its defect
    (``simulate.Defects``)."""
    rng = random.Random(fleet.seed)
    run = f"{fleet.seed}-{int(clock() * 1000):x}"
    names = [f"device-{n:05d}" for n in range(fleet.devices)]
    chosen_by = list(itertools.accumulate(fleet.device_rates()))  # a bisect per event, not a sum
    defects = Defects(fleet.late_ratio, fleet.out_of_order_ratio, fleet.duplicate_ratio, fleet.malformed_ratio)
    sent: list[SimRecord] = []
    valid = 0
    for n in itertools.count():
        device = rng.choices(names, cum_weights=chosen_by)[0]
        record = defects.record(rng, n, run, device, int(clock() * 1000), sent)
        sent.append(record)
        if len(sent) > 2 * RECENT:  # only the last RECENT can be re-sent
            del sent[:-RECENT]
        yield EVENT, record
        if record.kind == "event":
            valid += 1
            if valid % fleet.alert_every == 0:
                yield ALERT, _alert(fleet, rng, run, device, json.loads(record.value)["event_time"], valid)


def _alert(fleet: Fleet, rng: random.Random, run: str, device: str, at: str, n: int) -> SimRecord:
    silent = rng.random() < fleet.silent_ratio
    device = f"silent-{rng.randrange(5):02d}" if silent else device
    body = {"alert_id": f"alert-{run}-{n}", "device_id": device, "alert_time": at,
            "severity": rng.choice(["critical", "warning", "info"]), "kind": "threshold"}
    kind = "silent_alert" if silent else "alert"
    if rng.random() < fleet.bad_alert_ratio:
        body["severity"], kind = "catastrophic", "bad_severity"
    return SimRecord(device.encode(), json.dumps(body).encode(), kind)
