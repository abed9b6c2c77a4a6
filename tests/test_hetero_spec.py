"""Jobs that accept several GPU types: compact spec, Kubeflow annotation, the store."""

from __future__ import annotations

import copy

import pytest
import yaml

from tests.conftest import read_example
from voda.core.model import ANY_GPU_TYPE, JobStatus
from voda.engine.scheduler import JobRecord
from voda.spec import SpecError, parse_document
from voda.store import jobs as store
from voda.store.db import make_engine, migrate, session_factory

COMPACT = {"name": "train", "command": "python train.py", "min": 1, "max": 4}


@pytest.mark.parametrize(("value", "types"), [
    (["a100", "t4"], ("a100", "t4")),
    ("a100, t4,a100", ("a100", "t4")),
    ("any", (ANY_GPU_TYPE,)),
    (["*"], (ANY_GPU_TYPE,)),
])
def test_compact_spec_names_the_types_it_accepts(value: object, types: tuple) -> None:
    assert parse_document({**COMPACT, "gpu_types": value}).gpu_types == types


def test_a_job_naming_no_types_keeps_its_one_type() -> None:
    spec = parse_document({**COMPACT, "gpu_type": "a100"})
    assert (spec.gpu_type, spec.gpu_types) == ("a100", ())


@pytest.mark.parametrize(("value", "message"), [
    ([], "1 to 16"),
    ([f"t{i}" for i in range(17)], "1 to 16"),
    (["a100", ""], "non-empty"),
    ("a100,bad type", "not a GPU type name"),
    (7, "must be a list"),
])
def test_bad_type_lists_name_the_field(value: object, message: str) -> None:
    with pytest.raises(SpecError) as info:
        parse_document({**COMPACT, "gpu_types": value})
    assert any(e.field == "gpu_types" and message in e.reason for e in info.value.errors)


def test_one_type_and_several_are_not_both_given() -> None:
    with pytest.raises(SpecError, match="not both"):
        parse_document({**COMPACT, "gpu_type": "a100", "gpu_types": ["t4"]})


def test_kubeflow_annotation() -> None:
    doc = copy.deepcopy(yaml.safe_load(read_example("mpijob.yaml")))
    doc["metadata"].setdefault("annotations", {})["voda.io/gpu-types"] = "a100,t4"
    doc["metadata"]["annotations"].pop("voda.io/gpu-type", None)
    assert parse_document(doc).gpu_types == ("a100", "t4")
    doc["metadata"]["annotations"]["voda.io/gpu-types"] = "a100,no way"
    with pytest.raises(SpecError) as info:
        parse_document(doc)
    assert info.value.errors[0].field == "metadata.annotations.voda.io/gpu-types"


def test_the_store_keeps_the_accepted_types_and_the_chosen_one(store_url: str) -> None:
    engine = make_engine(store_url)
    migrate(engine)
    sessions = session_factory(engine)
    record = JobRecord("h-1", 1, 4, gpu_types=("a100", "t4"), category="c")
    meta = {"user": "alice", "kind": "VodaJob", "spec": {}}
    with sessions.begin() as session:
        store.insert_jobs(session, [store.new_job_values(record, meta, 1.0)])
    record.gpu_type, record.status = "a100", JobStatus.RUNNING
    with sessions.begin() as session:
        store.save_states(session, [store.state_values(record, 2.0)])
    with sessions() as session:
        back = store.row_to_record(store.load_jobs(session)[0])
    assert (back.gpu_types, back.gpu_type) == (("a100", "t4"), "a100")
    engine.dispose()
