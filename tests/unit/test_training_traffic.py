"""A multi-node training job's own traffic (all-reduce on the host network, checkpoint writes, epoch reads) is not
input starvation, whatever the sampling interval: a fleet of training jobs with no fault opens no IO starvation
incident sampled every 1, 5, 10, 30 or 60 s."""
import pytest

from gpufleet.collectors.simulator import FleetSpec, Simulation
from gpufleet.streams.pipeline import Pipeline

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("interval_s", [1.0, 5.0, 10.0, 30.0, 60.0])
def test_training_traffic_is_not_input_starvation(interval_s):
    spec = FleetSpec(nodes=4, gpus_per_node=8, hours=3, seed=31, faults_per_kind=0, training_share=1.0,
                     interval_s=interval_s)
    sim = Simulation(spec)
    pipeline = Pipeline()
    busy_net = 0
    for i, m in enumerate(sim.messages()):
        pipeline.submit(m, f"sim:{i}")
        busy_net += (m.get("host") or {}).get("net_rx_bytes_per_s", 0) > 1e9
    pipeline.flush()
    assert busy_net > 0, "the fleet's training jobs talk over the host network"
    starved = [e["summary"] for e in pipeline.out.events if e.get("kind") == "io_starvation"]
    assert starved == []
