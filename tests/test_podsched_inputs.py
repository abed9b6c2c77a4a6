"""What the pod scheduler reads: annotations, pods, nodes, filters and its configuration."""

from __future__ import annotations

import pytest

from tests.pod_builders import make_nodes, make_pod
from voda.podsched import filters
from voda.podsched.config import ConfigError, SchedulerConfig, parse, parse_text
from voda.podsched.hints import read_hints
from voda.podsched.model import CPU, GPU, MEMORY, Requirement, SelectorTerm, Strategy, Taint
from voda.podsched.read import ObjectError, annotation_layers, read_node, read_pod

# ----- annotations -------------------------------------------------------------------


def test_both_spellings_are_read_and_the_pod_overrides_its_owner() -> None:
    pod = {"voda.io/placement-strategy": "distributed"}
    owner = {"topology.scheduler/gpu-count": "8", "topology.scheduler/placement-strategy":
             "consolidated", "topology.scheduler/network-bandwidth": "200Gb",
             "topology.scheduler/latency-sensitive": "true",
             "topology.scheduler/preferred-domain": "leaf-1"}
    hints, problems = read_hints([pod, owner])
    assert problems == []
    assert hints.gpu_count == 8 and hints.strategy == Strategy.DISTRIBUTED
    assert hints.network_bandwidth == 200.0 and hints.latency_sensitive
    assert hints.preferred_domain == "leaf-1"


def test_voda_spelling_wins_on_one_object() -> None:
    hints, _ = read_hints([{"voda.io/gpu-count": "4", "topology.scheduler/gpu-count": "8"}])
    assert hints.gpu_count == 4


@pytest.mark.parametrize(("raw", "gbps"), [("100", 100.0), ("25G", 25.0), ("400Mbps", 0.4),
                                           ("1.6Tb", 1600.0), ("100 Gbit/s", 100.0)])
def test_bandwidths_in_the_usual_spellings(raw: str, gbps: float) -> None:
    assert read_hints([{"voda.io/network-bandwidth": raw}])[0].network_bandwidth == gbps


@pytest.mark.parametrize(
    ("annotation", "value", "says"),
    [
        ("voda.io/gpu-count", "0", "[1, 65536]"),
        ("voda.io/gpu-count", "99999999", "[1, 65536]"),
        ("voda.io/gpu-count", "four", "[1, 65536]"),
        ("topology.scheduler/placement-strategy", "scattered", "consolidated, distributed"),
        ("voda.io/network-bandwidth", "fast", "bandwidth"),
        ("voda.io/network-bandwidth", "0", "more than 0"),
        ("voda.io/network-bandwidth", "9" * 30, "at most"),
        ("voda.io/latency-sensitive", "yes", "'true' or 'false'"),
        ("voda.io/required-topology", "not a label!", "node label key"),
        ("voda.io/preferred-topology", "a/b/c", "node label key"),
        ("voda.io/preferred-domain", "x" * 300, "at most 253"),
    ],
)
def test_bad_values_are_named_never_defaulted(annotation: str, value: str, says: str) -> None:
    _, problems = read_hints([{annotation: value}])
    assert len(problems) == 1
    assert problems[0].startswith(f"{annotation}: ") and says in problems[0]
    assert len(problems[0]) < 400  # a hostile value is not echoed whole


def test_topology_levels_are_label_keys() -> None:
    hints, problems = read_hints([{"voda.io/required-topology": "voda.io/leaf",
                                   "voda.io/preferred-topology": "topology.kubernetes.io/zone"}])
    assert not problems
    assert hints.required_topology == "voda.io/leaf"
    assert hints.preferred_topology == "topology.kubernetes.io/zone"


# ----- pods and nodes --------------------------------------------------------------------
def _pod_object(**spec) -> dict:
    return {"metadata": {"name": "p", "namespace": "ns", "uid": "u1",
                         "annotations": {"voda.io/gpu-count": "4"},
                         "ownerReferences": [{"kind": "Job", "name": "train", "uid": "j1",
                                              "controller": True}]},
            "spec": {"schedulerName": "voda-scheduler", **spec}}


def test_requests_follow_kubernetes_rules() -> None:
    pod = read_pod(_pod_object(
        containers=[
            {"name": "a", "resources": {"limits": {GPU: "2", CPU: "1", MEMORY: "1Gi"}}},
            {"name": "b", "resources": {"requests": {CPU: "500m"}, "limits": {CPU: "2"}}},
        ],
        initContainers=[
            {"name": "setup", "resources": {"requests": {CPU: "4", MEMORY: "64Mi"}}},
            {"name": "sidecar", "restartPolicy": "Always",
             "resources": {"requests": {CPU: "250m"}}},
        ],
        overhead={CPU: "100m"},
    ))
    # containers 1 + 0.5 + sidecar 0.25 = 1.75 < init 4 -> 4, then overhead 0.1
    assert pod.requests == {GPU: 2, CPU: 4100, MEMORY: 1 << 30}
    assert pod.owner is not None and pod.owner.kind == "Job" and pod.owner.name == "train"
    assert pod.gpus == 2


def test_affinity_tolerations_and_selector_are_read() -> None:
    pod = read_pod(_pod_object(
        containers=[{"name": "a"}],
        nodeSelector={"pool": "a"},
        tolerations=[{"key": "dedicated", "operator": "Equal", "value": "infer",
                      "effect": "NoSchedule"}],
        affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [
                {"key": "gpu", "operator": "In", "values": ["a100", "h100"]}]}]}}},
    ))
    assert pod.node_selector == {"pool": "a"}
    assert pod.tolerations[0].key == "dedicated"
    assert pod.affinity == (SelectorTerm((Requirement("gpu", "In", ("a100", "h100")),)),)


@pytest.mark.parametrize("bad", ["lots", "-1", "1" * 80])
def test_a_bad_quantity_names_its_field(bad: str) -> None:
    with pytest.raises(ObjectError, match=r"spec.containers\[0\].resources.nvidia.com/gpu"):
        read_pod(_pod_object(containers=[{"name": "a", "resources": {"limits": {GPU: bad}}}]))


def test_owner_annotations_layer_under_the_pods() -> None:
    pod = read_pod(_pod_object(containers=[]))
    layers = annotation_layers(pod, [{"metadata": {"annotations": {"voda.io/gpu-count": "8"}}}])
    assert read_hints(layers)[0].gpu_count == 4


def test_nodes_are_read_with_their_topology_labels() -> None:
    node = read_node({
        "metadata": {"name": "n1", "labels": {"rack": "r1", "row": "w1"}},
        "spec": {"unschedulable": True, "taints": [{"key": "k", "effect": "NoExecute"}]},
        "status": {"allocatable": {GPU: "8", CPU: "63500m", MEMORY: "500Gi", "pods": "110"},
                   "conditions": [{"type": "Ready", "status": "False"}]},
    }, leaf_label="rack", spine_label="row")
    assert node.allocatable == {GPU: 8, CPU: 63500, MEMORY: 500 << 30, "pods": 110}
    assert (node.leaf, node.spine, node.ready, node.unschedulable) == ("r1", "w1", False, True)
    assert node.taints == (Taint("k", "", "NoExecute"),)


# ----- filters ------------------------------------------------------------------------------
NODE = make_nodes().spines(1).leaves(1).nodes(1).obj()[0]


@pytest.mark.parametrize(
    ("operator", "values", "label", "matches"),
    [
        ("In", ("a", "b"), "a", True), ("In", ("a",), None, False),
        ("NotIn", ("a",), "b", True), ("NotIn", ("a",), None, True),
        ("Exists", (), "x", True), ("DoesNotExist", (), "x", False),
        ("Gt", ("3",), "4", True), ("Gt", ("3",), "3", False), ("Lt", ("3",), "x", False),
        ("Unknown", (), "x", False),
    ],
)
def test_node_affinity_operators(operator, values, label, matches) -> None:
    labels = dict(NODE.labels) | ({} if label is None else {"k": label})
    node = NODE.__class__(NODE.name, NODE.allocatable, labels)
    pod = make_pod("p").with_(affinity=(SelectorTerm((Requirement("k", operator, values),)),)
                              ).obj()
    assert filters.matches_node(pod, node) is matches


def test_affinity_terms_are_ored_and_empty_terms_match_nothing() -> None:
    by_name = SelectorTerm(fields=(Requirement("metadata.name", "In", (NODE.name,)),))
    never = SelectorTerm()
    assert filters.matches_node(make_pod("p").with_(affinity=(never, by_name)).obj(), NODE)
    assert not filters.matches_node(make_pod("p").with_(affinity=(never,)).obj(), NODE)


@pytest.mark.parametrize(
    ("toleration", "taint", "ok"),
    [
        (("", "Exists", "", ""), Taint("any", "v", "NoExecute"), True),
        (("k", "Exists", "", "NoSchedule"), Taint("k", "v", "NoExecute"), False),
        (("k", "Equal", "v", ""), Taint("k", "v", "NoSchedule"), True),
        (("k", "Equal", "w", ""), Taint("k", "v", "NoSchedule"), False),
        (None, Taint("k", "v", "PreferNoSchedule"), True),
    ],
)
def test_taints_and_tolerations(toleration, taint, ok) -> None:
    builder = make_pod("p")
    if toleration is not None:
        key, operator, value, effect = toleration
        builder = builder.tolerates(key, value, effect, operator)
    node = NODE.__class__(NODE.name, NODE.allocatable, NODE.labels, (taint,))
    assert (filters.static_problem(builder.obj(), node) is None) is ok


def test_a_pod_tolerating_unschedulable_may_go_to_a_cordoned_node() -> None:
    cordoned = NODE.__class__(NODE.name, NODE.allocatable, NODE.labels, unschedulable=True)
    assert filters.static_problem(make_pod("p").obj(), cordoned) == filters.CORDONED
    tolerant = make_pod("p").tolerates(filters.UNSCHEDULABLE_TAINT, operator="Exists").obj()
    assert filters.static_problem(tolerant, cordoned) is None


# ----- configuration -------------------------------------------------------------------------
def test_the_learned_schedulers_config_object_is_accepted() -> None:
    config = parse_text("""
apiVersion: topology.scheduler/v1alpha1
kind: SchedulerConfig
metadata: {name: topology-scheduler-config}
spec:
  scoringWeights: {resourceAvailability: 0.5, topologyAlignment: 0.2, domainUtilization: 0.2,
                   historicalPerformance: 0.1}
  topologyConstraints: {maxNodesPerLeaf: 4, maxGPUsPerLeaf: 32}
""")
    assert (config.placement.resource_weight, config.placement.max_nodes_per_leaf,
            config.placement.max_gpus_per_leaf) == (
        0.5, 4, 32)
    assert config.placement_settings(8).max_gpus_per_leaf == 4  # in pods of 8 GPUs
    assert parse_text("") == SchedulerConfig()
    assert parse({"leafUplinkBandwidth": 400}).placement.leaf_uplink_bandwidth == 400.0


@pytest.mark.parametrize(
    ("document", "says"),
    [
        ({"scoringWeights": {"resourceAvailabilty": 1}}, "scoringWeights.resourceAvailabilty: "
                                                         "unknown field"),
        ({"scoringWeights": {"topologyAlignment": -1}}, "scoringWeights.topologyAlignment: "
                                                        "must lie in"),
        ({"scoringWeights": {"topologyAlignment": "high"}}, "must be a number"),
        ({"topologyConstraints": {"maxNodesPerLeaf": 0}}, "maxNodesPerLeaf: must be an integer"),
        ({"topologyConstraints": {"maxGPUsPerLeaf": 2.5}}, "maxGPUsPerLeaf: must be an integer"),
        ({"domainPerformance": {"leaf-1": 2}}, "domainPerformance.leaf-1: must lie in [0, 1]"),
        ({"leafUplinkBandwidth": 0}, "leafUplinkBandwidth: must lie in (0"),
        ({"notReadyGraceSeconds": float("nan")}, "notReadyGraceSeconds: must be a number"),
        ({"kind": "Other", "spec": {}}, "kind: must be SchedulerConfig"),
        ({"spec": {"bogus": 1}}, "spec.bogus: unknown field"),
        ([1, 2], "document: must be a mapping"),
    ],
)
def test_bad_configuration_names_the_field(document, says) -> None:
    with pytest.raises(ConfigError) as caught:
        parse(document)
    assert says in str(caught.value)


def test_bad_text_and_huge_documents_are_refused() -> None:
    with pytest.raises(ConfigError, match="not valid YAML"):
        parse_text("a: [")
    with pytest.raises(ConfigError, match="larger than"):
        parse_text("#" * (2 << 20))
