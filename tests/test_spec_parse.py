"""Parsing of submissions: the examples, and bad documents named field by field."""

from __future__ import annotations

import copy
import json

import pytest
import yaml

from tests.conftest import read_example
from voda.spec import SpecError, parse_document, parse_submission


@pytest.mark.parametrize(
    ("example", "kind", "name", "low", "high", "epochs", "priority"),
    [
        ("compact.yaml", "VodaJob", "resnet-cifar", 1, 4, 10, 1),
        ("mpijob.yaml", "MPIJob", "tf-mnist", 1, 4, 5, 0),
        ("pytorchjob.yaml", "PyTorchJob", "bert-finetune", 1, 3, 3, 2),
    ],
    ids=["a compact spec", "an MPIJob with voda annotations", "a PyTorchJob with elasticPolicy"],
)
def test_examples_parse(example: str, kind: str, name: str, low: int, high: int, epochs: int,
                        priority: int) -> None:
    spec = parse_submission(read_example(example))
    assert (spec.kind, spec.name) == (kind, name)
    assert (spec.min_workers, spec.max_workers, spec.epochs, spec.priority) == (
        low, high, epochs, priority)
    assert spec.command or spec.image


def test_json_is_accepted_as_well_as_yaml() -> None:
    doc = yaml.safe_load(read_example("compact.yaml"))
    assert parse_submission(json.dumps(doc).encode()) == parse_submission(
        read_example("compact.yaml"))


def test_min_alone_means_a_fixed_size() -> None:
    spec = parse_document({"name": "a", "command": "x", "min": 3})
    assert (spec.min_workers, spec.max_workers) == (3, 3)


def test_category_defaults_to_profile_then_name() -> None:
    assert parse_document({"name": "a", "command": "x", "profile": "ncf"}).category == "ncf"
    assert parse_document({"name": "a", "command": "x"}).category == "a"


def _mpijob() -> dict:
    return yaml.safe_load(read_example("mpijob.yaml"))


def _pytorchjob() -> dict:
    return yaml.safe_load(read_example("pytorchjob.yaml"))


def _with(doc: dict, path: str, value: object) -> dict:
    doc = copy.deepcopy(doc)
    *parents, last = path.split("/")
    node = doc
    for part in parents:
        node = node[part]
    node[last] = value
    return doc


BAD = [
    ("not yaml", b"name: [unclosed", "body"),
    ("an empty body", b"   ", "body"),
    ("a list, not a mapping", b"- 1\n- 2\n", "body"),
    ("an unknown kind", b"kind: TFJob\napiVersion: kubeflow.org/v1\n", "kind"),
    ("min greater than max", b"name: a\ncommand: x\nmin: 3\nmax: 2\n", "max"),
    ("min below one", b"name: a\ncommand: x\nmin: 0\n", "min"),
    ("neither command nor image", b"name: a\nmin: 1\n", "command"),
    ("no name", b"command: x\n", "name"),
    ("an upper-case name", b"name: Big\ncommand: x\n", "name"),
    ("a non-integer max", b"name: a\ncommand: x\nmax: many\n", "max"),
    ("a negative priority", b"name: a\ncommand: x\npriority: -1\n", "priority"),
    ("zero epochs", b"name: a\ncommand: x\nepochs: 0\n", "epochs"),
    ("preferred outside the range", b"name: a\ncommand: x\nmin: 1\nmax: 2\npreferred: 3\n",
     "preferred"),
    ("an unknown field", b"name: a\ncommand: x\ngpus: 3\n", "gpus"),
    ("an MPIJob whose slotsPerWorker is a string",
     yaml.safe_dump(_with(_mpijob(), "spec/slotsPerWorker", "one")).encode(),
     "spec.slotsPerWorker"),
    ("an MPIJob without mpiReplicaSpecs",
     yaml.safe_dump(_with(_mpijob(), "spec/mpiReplicaSpecs", None)).encode(),
     "spec.mpiReplicaSpecs"),
    ("an MPIJob whose min-workers annotation is not a number",
     yaml.safe_dump({**_mpijob(), "metadata": {
         "name": "m", "annotations": {"voda.io/min-workers": "x"}}}).encode(),
     "metadata.annotations.voda.io/min-workers"),
    ("a PyTorchJob with minReplicas above maxReplicas",
     yaml.safe_dump(_with(_pytorchjob(), "spec/elasticPolicy/minReplicas", 5)).encode(),
     "spec.elasticPolicy.maxReplicas"),
    ("a PyTorchJob whose minReplicas is a string",
     yaml.safe_dump(_with(_pytorchjob(), "spec/elasticPolicy/minReplicas", "two")).encode(),
     "spec.elasticPolicy.minReplicas"),
]


@pytest.mark.parametrize(("body", "field"), [(b, f) for _, b, f in BAD],
                         ids=[f"refuses {what}" for what, _, _ in BAD])
def test_bad_documents_name_the_field(body: bytes, field: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_submission(body)
    fields = [e.field for e in caught.value.errors]
    assert field in fields, fields
    assert all(e.reason for e in caught.value.errors)
