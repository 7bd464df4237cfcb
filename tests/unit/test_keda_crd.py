"""The sample ScaledObject (deploy/kubernetes/keda-scaledobject.yaml) against the CRD of the KEDA release the docs
pin (deploy/kubernetes/crds, v2.20.2), offline: the CRD's openAPIV3Schema as the API server applies it with strict
field validation, its CEL rule, and the metrics-api scaler's own parameters. Broken variants are refused."""
import copy
import hashlib
from pathlib import Path

import jsonschema
import pytest
import yaml

KUBE = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes"
CRD = KUBE / "crds" / "keda.sh_scaledobjects.yaml"
SAMPLE = KUBE / "keda-scaledobject.yaml"
KEDA = "v2.20.2"
SHA256 = "af35555862a83933b074af14ad439c4b4ceabaf4daa3e9338e9b23e36d308d80"
CEL = ("!has(self.minReplicaCount) || self.minReplicaCount <= (has(self.maxReplicaCount) ? self.maxReplicaCount : "
       "100)")
# KEDA v2.20.2's metrics-api scaler: the trigger metadata it reads (its typed config and the authentication
# parameters it takes from the trigger's metadata), and the enums among them
METRICS_API = {"targetValue", "activationTargetValue", "url", "format", "valueLocation", "unsafeSsl",
               "aggregateFromKubeServiceEndpoints", "aggregationType", "timeout", "authModes", "authMode", "method",
               "keyParamName", "apiKey"}
METRICS_API_ENUMS = {"format": {"prometheus", "json", "xml", "yaml"}, "aggregationType": {"average", "sum", "max",
                                                                                          "min"}}


def strict(node):
    """A structural schema as JSON Schema: objects with properties refuse other fields unless the schema keeps
    them (x-kubernetes-preserve-unknown-fields), int-or-string is either, nullable admits null."""
    if isinstance(node, list):
        return [strict(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: strict(v) for k, v in node.items() if k != "x-kubernetes-validations"}
    if out.pop("x-kubernetes-int-or-string", False):
        out.pop("type", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if out.pop("nullable", False) and "type" in out:
        out["type"] = [out["type"], "null"]
    if "properties" in out and "additionalProperties" not in out and not out.get(
            "x-kubernetes-preserve-unknown-fields"):
        out["additionalProperties"] = False
    return out


@pytest.fixture(scope="module")
def crd():
    assert hashlib.sha256(CRD.read_bytes()).hexdigest() == SHA256, "the pinned CRD file changed"
    doc = yaml.safe_load(CRD.read_text())
    assert doc["kind"] == "CustomResourceDefinition" and doc["metadata"]["name"] == "scaledobjects.keda.sh"
    (version,) = [v for v in doc["spec"]["versions"] if v["served"] and v["storage"]]
    schema = version["schema"]["openAPIV3Schema"]
    assert [v["rule"] for v in schema["properties"]["spec"]["x-kubernetes-validations"]] == [CEL]
    top = strict(schema)
    top["properties"]["apiVersion"] = {"const": f"{doc['spec']['group']}/{version['name']}"}
    top["properties"]["kind"] = {"const": doc["spec"]["names"]["kind"]}
    top["required"] = sorted({*top.get("required", ()), "apiVersion", "kind", "metadata"})
    return jsonschema.Draft7Validator(top)


@pytest.fixture(scope="module")
def sample():
    docs = [d for d in yaml.safe_load_all(SAMPLE.read_text()) if d]
    (so,) = [d for d in docs if d.get("kind") == "ScaledObject"]
    return so


def problems(validator, so) -> list[str]:
    found = [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(so)]
    spec = so.get("spec", {})
    if "minReplicaCount" in spec and spec["minReplicaCount"] > spec.get("maxReplicaCount", 100):   # the CEL rule
        found.append("spec: minReplicaCount must be less than or equal to maxReplicaCount")
    for i, t in enumerate(spec.get("triggers") or []):
        if t.get("type") != "metrics-api" or not isinstance(t.get("metadata"), dict):
            continue
        meta = t["metadata"]
        found += [f"spec.triggers.{i}.metadata.{k}: not a metrics-api parameter" for k in meta if k not in METRICS_API]
        found += [f"spec.triggers.{i}.metadata.{k}: {meta[k]!r} is not one of {sorted(v)}"
                  for k, v in METRICS_API_ENUMS.items() if k in meta and meta[k] not in v]
        found += [f"spec.triggers.{i}.metadata.{k}: required" for k in ("url", "valueLocation") if k not in meta]
        try:
            if float(meta.get("targetValue", "0")) <= 0:
                found.append(f"spec.triggers.{i}.metadata.targetValue: must be a positive number")
        except (TypeError, ValueError):
            found.append(f"spec.triggers.{i}.metadata.targetValue: not a number")
    return found


def test_the_sample_scaled_object_is_valid_against_the_pinned_crd(crd, sample):
    assert problems(crd, sample) == []
    trigger = sample["spec"]["triggers"][0]
    assert trigger["type"] == "metrics-api" and trigger["metadata"]["valueLocation"] == "target_gpus"
    assert trigger["metadata"]["url"].endswith("/v1/scale?pool=h100-sxm-east")


def broken(sample, change):
    so = copy.deepcopy(sample)
    change(so)
    return so


@pytest.mark.parametrize("what, change, words", [
    ("no scale target", lambda so: so["spec"].pop("scaleTargetRef"), "'scaleTargetRef' is a required property"),
    ("no triggers", lambda so: so["spec"].update(triggers=[]), "should be non-empty"),
    ("a misspelt field", lambda so: so["spec"].update(pollingIntervall=60), "'pollingIntervall' was unexpected"),
    ("a field of the wrong type", lambda so: so["spec"].update(pollingInterval="60"), "'60' is not of type 'integer'"),
    ("a trigger without metadata", lambda so: so["spec"]["triggers"][0].pop("metadata"),
     "'metadata' is a required property"),
    ("metadata that is not a string", lambda so: so["spec"]["triggers"][0]["metadata"].update(targetValue=8),
     "8 is not of type 'string'"),
    ("min above max", lambda so: so["spec"].update(minReplicaCount=80), "minReplicaCount must be less than or equal"),
    ("the wrong API version", lambda so: so.update(apiVersion="keda.sh/v1"), "'keda.sh/v1alpha1' was expected"),
    ("a misspelt HPA behaviour", lambda so: so["spec"]["advanced"]["horizontalPodAutoscalerConfig"].update(
        behaviour={}), "'behaviour' was unexpected"),
    ("a metrics-api parameter that does not exist", lambda so: so["spec"]["triggers"][0]["metadata"].update(
        valueLocations="target_gpus"), "valueLocations: not a metrics-api parameter"),
    ("a format the scaler does not read", lambda so: so["spec"]["triggers"][0]["metadata"].update(format="csv"),
     "'csv' is not one of"),
])
def test_broken_variants_are_refused(crd, sample, what, change, words):
    found = problems(crd, broken(sample, change))
    assert any(words in p for p in found), (what, found)
