"""The collector's message: the whole schema, attribution, seq and dropped."""
import json

from gpufleet.collectors.attribution import Attributor, LabelsFile
from gpufleet.collectors.collector import Collector
from gpufleet.collectors.host import HostSampler
from gpufleet.collectors.nvml import NvmlReader
from gpufleet.collectors.nvml_standin import StandIn, Timing
from gpufleet.contracts.telemetry import parse


def test_messages_are_valid_telemetry_with_attribution(tmp_path):
    labels = tmp_path / "labels.json"
    lib = StandIn(gpus=3, timing=Timing(0))
    labels.write_text(json.dumps({lib.gpus[1].uuid: {"tenant": "acme", "job": "train-9"}}))
    lib.install()
    reader = NvmlReader()
    reader.open()
    c = Collector("node-7", reader, HostSampler(), Attributor(LabelsFile(str(labels))), pool="h100", interval_s=1)
    first, second = c.collect(), c.collect(dropped=4)
    for m in (first, second):
        parsed = parse(json.dumps(m))
        assert parsed.node == "node-7" and parsed.pool == "h100" and len(parsed.gpus) == 3
    assert (first["seq"], second["seq"]) == (0, 1) and first["collector_id"] == second["collector_id"]
    assert second["dropped"] == 4 and first["dropped"] == 0
    g = second["gpus"][1]
    assert (g["tenant"], g["job"], g["attribution"]) == ("acme", "train-9", "labels")
    assert second["gpus"][0]["tenant"] is None
    other = Collector("node-7", reader)
    assert other.collector_id != c.collector_id
    reader.close()
    lib.uninstall()


def test_the_collectors_daemonset_asks_for_the_nvidia_runtime():
    """Without the NVIDIA container runtime the driver's libnvidia-ml.so.1 never reaches the container (unless
    nvidia is the node's default runtime), and the collector would say there is no driver on a node that has one."""
    from pathlib import Path
    spec = (Path(__file__).parents[2] / "deploy" / "kubernetes" / "collector-daemonset.yaml").read_text()
    pod = spec.split("kind: DaemonSet", 1)[1].split("containers:", 1)[0]
    assert [line.split("#")[0].strip() for line in pod.splitlines() if "runtimeClassName" in line] == \
        ["runtimeClassName: nvidia"]
