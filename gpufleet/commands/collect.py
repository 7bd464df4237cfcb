"""``gpufleet collect``: the node collector, its one-shot and check modes."""
from __future__ import annotations

import json
import time

from gpufleet.collectors.nvml_standin import PROFILES
from gpufleet.errors import UsageError
from gpufleet.settings import load_settings

from . import COMMANDS


def cmd_collect(args) -> int:
    from gpufleet.collectors import daemon
    from gpufleet.collectors.nvml import NvmlUnavailable

    overrides = {k: v for k, v in (("interval_s", args.interval), ("node", args.node), ("pool", args.pool),
                                   ("spool_dir", args.spool), ("labels_file", args.labels),
                                   ("metrics_port", args.metrics_port)) if v is not None}
    kafka = {k: v for k, v in (("bootstrap", args.bootstrap), ("telemetry_topic", args.topic)) if v is not None}
    settings = load_settings(args.config, **({"collect": overrides} if overrides else {}),
                             **({"kafka": kafka} if kafka else {}))
    if args.fake_gpus is not None and not 0 <= args.fake_gpus <= 64:
        raise UsageError(f"{args.prog}: argument --fake-gpus: {args.fake_gpus} is not between 0 and 64")
    lib = None
    if args.fake_gpus is not None:
        import pynvml

        from gpufleet.collectors.nvml_standin import StandIn
        StandIn(gpus=args.fake_gpus, seed=args.seed, profile=args.fake_driver).install()    # for this process
        lib = pynvml
    try:
        if args.check:
            return _collect_check(daemon.build(settings.collect, lib)[0])
        if args.once:
            reader, collector = daemon.build(settings.collect, lib)
            try:
                reader.start()
                collector.collect()                                  # rates need two readings
                time.sleep(min(1.0, settings.collect.interval_s))
                print(json.dumps(collector.collect(), indent=2))
            finally:
                reader.close()
            return 0
        return daemon.run(settings.collect, settings.kafka.bootstrap, settings.kafka.telemetry_topic, lib)
    except NvmlUnavailable as err:
        raise UsageError(f"{args.prog}: {err} (or try it with --fake-gpus N)") from None


def _collect_check(reader) -> int:
    """``collect --check``: what this node's driver and GPUs let the collector read."""
    try:
        v = reader.versions()
        print(f"driver {v['driver'] or '?'}, NVML {v['nvml'] or '?'}, CUDA {v['cuda'] or '?'}; "
              f"{len(reader.physical)} GPUs, {len(reader.devices)} sampled devices")
        for d, ways in reader.capabilities():
            what = f"MIG {d.mig_profile} of GPU {d.index}" if d.parent else f"GPU {d.index}"
            print(f"\n{what}: {d.model or '?'} {d.uuid}")
            for name, how in ways.items():
                print(f"  {name}: {how}")
    finally:
        reader.close()
    return 0


def add_collect(sub) -> None:
    s = sub.add_parser("collect", help=COMMANDS["collect"].summary,
                       description="Sample every GPU (or MIG instance) through NVML and the host through /proc "
                                   "every interval, attribute GPUs to tenants and jobs, and publish one "
                                   "gpufleet.telemetry.v1 message per tick to Kafka (key = node). Messages go "
                                   "through a bounded on-disk spool first, so a broker outage loses nothing "
                                   "within the bound. SIGTERM flushes and exits.")
    s.add_argument("--fake-gpus", type=int, metavar="N",
                   help="N simulated GPUs behind the real pynvml (a stand-in for the driver's library; no GPU needed)")
    s.add_argument("--fake-driver", default="R550", metavar="BRANCH", choices=sorted(PROFILES),
                   help=f"driver branch of the fake GPUs: {', '.join(sorted(PROFILES))} (default R550)")
    s.add_argument("--seed", type=int, default=0, help="seed of the fake GPUs (default 0)")
    s.add_argument("--once", action="store_true", help="print one message to stdout and exit (no Kafka)")
    s.add_argument("--check", action="store_true",
                   help="print what this node can read (driver and NVML versions, every GPU and MIG instance, "
                        "each field and the NVML function that gives it) and exit")
    s.add_argument("--interval", type=float, help="sampling interval in seconds (setting collect.interval_s, 5)")
    s.add_argument("--node", help="node name (setting collect.node, default: the host name)")
    s.add_argument("--pool", help="capacity pool (setting collect.pool)")
    s.add_argument("--bootstrap", help="Kafka bootstrap servers (setting kafka.bootstrap)")
    s.add_argument("--topic", help="telemetry topic (setting kafka.telemetry_topic, gpufleet.telemetry)")
    s.add_argument("--spool", metavar="DIR", help="spool directory (setting collect.spool_dir)")
    s.add_argument("--labels", metavar="FILE", help="GPU UUID to tenant/job JSON file (setting collect.labels_file)")
    s.add_argument("--metrics-port", type=int,
                   help="serve Prometheus metrics on this port (setting collect.metrics_port)")
    s.set_defaults(fn=cmd_collect)
