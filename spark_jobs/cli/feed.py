"""`sigflow produce`, `simulate`: records into Kafka: a file of JSON lines as is, or a simulated fleet's events and alerts."""

from __future__ import annotations

import argparse
import math
from collections import Counter
from pathlib import Path

from spark_jobs.cli.common import settings_of
from spark_jobs.config import Settings
from spark_jobs.errors import SigflowError
from spark_jobs.local.simulate import MALFORMED_KINDS
from spark_jobs.runtime.kafka import address as kafka_address
from spark_jobs.runtime.kafka.admin import TopicMissing


def _contract_of(settings: Settings, topic: str):
    from spark_jobs.contracts.contract import ALERT_CONTRACT, EVENT_CONTRACT

    contracts = {settings.streaming.events_topic: EVENT_CONTRACT, settings.streaming.alerts_topic: ALERT_CONTRACT}
    if topic not in contracts:
        raise SigflowError(f"no contract for topic {topic}",
                           f"--validate checks lines for {settings.streaming.events_topic} or {settings.streaming.alerts_topic}")
    return contracts[topic]


def cmd_produce(args: argparse.Namespace) -> int:
    from spark_jobs.contracts import file_check
    from spark_jobs.runtime.kafka import producer

    settings = settings_of(args)
    topic = args.topic or settings.streaming.events_topic
    if not Path(args.file).is_file():
        found = "is a directory" if Path(args.file).is_dir() else "no such file"
        raise SigflowError(f"{args.file}: {found}", "give the path of a file of JSON lines, one record each")
    if args.validate:
        check = file_check.check_file(args.file, _contract_of(settings, topic), settings.streaming.max_clock_ahead.ms)
        if check.failed:
            for line in check.describe():
                print(line)
            raise SigflowError(
                f"{check.failed:,} of {check.lines:,} lines break the {check.contract} contract "
                f"(first {len(check.failures)} above); nothing was sent",
                "fix them (docs/event-contract.md: each reason code), or send without --validate "
                "and the jobs quarantine them",
            )
        print(f"{check.lines:,} lines meet the {check.contract} contract")
    bootstrap = kafka_address.connection(settings)
    records = producer.FileRecords(args.file)
    try:
        sent = producer.produce_records(bootstrap, topic, records, progress=True)
    except TopicMissing as missing:
        own = (settings.streaming.events_topic, settings.streaming.alerts_topic)
        if topic in (*own, settings.streaming.critical_alerts_topic):
            raise
        raise SigflowError(missing.message, f"the jobs read {own[0]} and {own[1]}: was --topic {topic} meant to be "
                           f"one of them? `sigflow topics create` makes only those") from None
    for line in records.refused:
        print(line)
    unkeyed = f" ({records.unkeyed:,} unkeyed: no string device_id found)" if records.unkeyed else ""
    print(f"produced {sent:,} records to {topic}{unkeyed}"
          + (f"; {len(records.refused):,} refused (listed above)" if records.refused else ""))
    return 0


def cmd_simulate(args: argparse.Namespace) -> int:
    _check_simulation(args)
    if not args.events:
        return _simulate_fleet(args)
    from spark_jobs.local import simulate
    from spark_jobs.runtime.kafka import producer

    settings = settings_of(args)
    bootstrap = kafka_address.connection(settings)
    records = simulate.generate_events(
        args.events, devices=args.devices, seed=args.seed,
        late_ratio=args.late, out_of_order_ratio=args.out_of_order,
        duplicate_ratio=args.duplicates, malformed_ratio=args.malformed,
    )
    sent = producer.produce_records(
        bootstrap, settings.streaming.events_topic, ((r.key, r.value) for r in records),
        total=len(records), progress=True,
    )
    kinds = Counter(r.kind for r in records)
    malformed = sum(n for k, n in kinds.items() if k in simulate.MALFORMED_KINDS)
    print(
        f"produced {sent:,} records to {settings.streaming.events_topic}: {kinds['event']:,} in order, "
        f"{kinds['out_of_order']:,} out of order, {kinds['late']:,} late, "
        f"{kinds['duplicate']:,} duplicates, {malformed:,} malformed"
    )
    alerts = simulate.generate_alerts(records, every=args.alert_every, seed=args.seed)
    producer.produce_records(bootstrap, settings.streaming.alerts_topic, ((r.key, r.value) for r in alerts))
    akinds = Counter(r.kind for r in alerts)
    print(
        f"produced {len(alerts):,} alerts to {settings.streaming.alerts_topic}: {akinds['silent_alert']:,} for "
        f"silent devices, {akinds['bad_severity']:,} malformed"
    )
    return 0


def _check_simulation(args: argparse.Namespace) -> None:
    """The simulation's numbers, refused where they enter: one line naming the option."""
    ratios = {"--late": args.late, "--out-of-order": args.out_of_order, "--duplicates": args.duplicates,
              "--malformed": args.malformed}
    wrong = [f"{name} {value:g}" for name, value in ratios.items() if not 0 <= value <= 1]
    if wrong or sum(ratios.values()) >= 1:
        raise SigflowError(f"simulate: {', '.join(wrong) or 'the defect ratios add up to 1 or more'}",
                           "each defect ratio is a share of the events between 0 and 1, together below 1")
    for name, value in (("--events", args.events), ("--devices", args.devices), ("--alert-every", args.alert_every)):
        if value < (0 if name == "--events" else 1):
            raise SigflowError(f"simulate: {name} {value} is out of range", f"give {name} a positive number")
    if args.events == 0 and not 0 < args.rate < math.inf:
        raise SigflowError(f"simulate: --rate {args.rate:g} events/s is no fleet's pace", "give a finite rate above 0")
    if args.duration is not None and not 0 < args.duration < math.inf:
        raise SigflowError(f"simulate: --duration {args.duration:g} s is not a duration",
                           "give seconds above 0, or no --duration to run until stopped")


def _simulate_fleet(args: argparse.Namespace) -> int:
    """A fleet sending ``--rate`` events/s by the wall clock, alerts among them, for
    ``--duration`` seconds or until Ctrl-C/SIGTERM."""
    from spark_jobs.local.fleet import ALERT, EVENT, Fleet, traffic
    from spark_jobs.runtime.kafka import producer

    settings = settings_of(args)
    topics = {EVENT: settings.streaming.events_topic, ALERT: settings.streaming.alerts_topic}
    fleet = Fleet(args.rate, devices=args.devices, seed=args.seed, late_ratio=args.late,
                  out_of_order_ratio=args.out_of_order, duplicate_ratio=args.duplicates,
                  malformed_ratio=args.malformed, alert_every=args.alert_every)
    kinds: Counter = Counter()

    def records():
        for to, record in traffic(fleet):
            kinds[record.kind] += 1
            yield topics[to], record.key, record.value

    until = f"for {args.duration:g} s" if args.duration else "until Ctrl-C"
    print(f"a fleet of {fleet.devices:,} devices sending {fleet.rate:g} events/s to {topics[EVENT]} "
          f"(alerts to {topics[ALERT]}), {until}")
    sent = producer.send_paced(kafka_address.connection(settings), records(), fleet.rate, topics[EVENT],
                               args.duration, progress=True)
    events, alerts = sent.acknowledged.get(topics[EVENT], 0), sent.acknowledged.get(topics[ALERT], 0)
    malformed = sum(n for k, n in kinds.items() if k in MALFORMED_KINDS)
    print(f"produced {events:,} records to {topics[EVENT]} in {sent.seconds:.0f} s "
          f"({events / max(sent.seconds, 1e-9):,.0f}/s): {kinds['out_of_order']:,} out of order, "
          f"{kinds['late']:,} late, {kinds['duplicate']:,} re-sent, {malformed:,} malformed; "
          f"{alerts:,} alerts to {topics[ALERT]}" + (f"; {sent.failed:,} refused by Kafka" if sent.failed else ""))
    return 0


def register(sub) -> None:
    p = sub.add_parser("produce", help="publish each line of a JSONL file as is")
    p.add_argument("--topic")
    p.add_argument("--file", required=True)
    p.add_argument("--validate", action="store_true",
                   help="check every line against the topic's contract first; send none if one fails")
    p.set_defaults(func=cmd_produce)

    p = sub.add_parser("simulate", help="device events with every kind of defect: a fleet at --rate by the "
                                        "wall clock, or --events N at once (seeded, for tests)")
    p.add_argument("--events", type=int, default=0,
                   help="this many, as fast as possible, event times 1 s apart ending now (reproducible: "
                        "the same ids every time)")
    p.add_argument("--rate", type=float, default=200.0,
                   help="without --events: the fleet's events per second, each stamped with the clock")
    p.add_argument("--duration", type=float, help="without --events: seconds to send (default: until Ctrl-C)")
    p.add_argument("--devices", type=int, default=20)
    p.add_argument("--seed", type=int, default=7,
                   help="fixes the devices' rates and the defects; a fleet's event and alert ids carry its "
                        "run's start, so a fleet simulated again sends ids of its own")
    p.add_argument("--late", type=float, default=0.02)
    p.add_argument("--out-of-order", type=float, default=0.05)
    p.add_argument("--duplicates", type=float, default=0.03)
    p.add_argument("--malformed", type=float, default=0.03)
    p.add_argument("--alert-every", type=int, default=50, help="one alert per N events")
    p.set_defaults(func=cmd_simulate)
