"""The store on SQLite and on a real PostgreSQL server: migrations and round trips."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import command
from alembic.config import Config

from voda.core.model import JobStatus
from voda.engine.scheduler import JobRecord
from voda.store import jobs as store
from voda.store.db import (
    HEAD_REVISION,
    MIGRATIONS,
    current_revision,
    make_engine,
    migrate,
    session_factory,
)

META = {"user": "alice", "kind": "VodaJob", "spec": {"name": "a", "command": "x"},
        "command": "x", "image": None, "profile": "ncf"}


def _record(name: str, **changes: object) -> JobRecord:
    values: dict = {"name": name, "min_workers": 1, "max_workers": 4, "epochs": 10,
                    "submit_time": 100.0, "category": "cat", "gpu_type": "default"}
    values.update(changes)
    return JobRecord(**values)


def test_migrations_create_the_tables_and_run_twice(store_url: str) -> None:
    engine = make_engine(store_url)
    migrate(engine)
    migrate(engine)  # already at head: nothing to do, no error
    assert current_revision(engine) == HEAD_REVISION
    tables = set(sa.inspect(engine).get_table_names())
    assert {"jobs", "job_history", "category_speed", "category_layout", "scheduler_settings",
            "backend_state", "alembic_version"} <= tables
    engine.dispose()


def test_jobs_round_trip_with_state_updates(store_url: str) -> None:
    engine = make_engine(store_url)
    migrate(engine)
    sessions = session_factory(engine)
    record = _record("a-1", priority=2)
    with sessions.begin() as session:
        store.insert_jobs(session, [store.new_job_values(record, META, 100.0)])
        store.add_history(session, [{"job": "a-1", "time": 100.0, "field": "status",
                                     "old": None, "new": "Submitted"}])
    record.status = JobStatus.RUNNING
    record.placement = (("node-0", 2), ("node-1", 1))
    record.current_workers = 3
    record.attained_gpu_seconds = 42.5
    record.attained_gpu_seconds_since_promotion = 12.5
    record.running_seconds_since_promotion = 4.0
    record.waiting_seconds_since_promotion = 9.0
    record.running_seconds_since_epoch = 6.5
    record.attained_gpu_seconds_since_epoch = 19.5
    record.promotions = 2
    record.epoch_time_by_workers = {3: 7.5}
    record.priority = 0
    with sessions.begin() as session:
        store.save_states(session, [store.state_values(record, 120.0)])
    with sessions() as session:
        rows = store.load_jobs(session)
        assert len(rows) == 1 and rows[0].accounted_at == 120.0
        back = store.row_to_record(rows[0])
        assert len(store.history(session, "a-1")) == 1
    assert back.status is JobStatus.RUNNING
    assert back.placement == (("node-0", 2), ("node-1", 1))
    assert (back.attained_gpu_seconds, back.priority) == (42.5, 0)
    assert (back.attained_gpu_seconds_since_promotion, back.running_seconds_since_promotion,
            back.waiting_seconds_since_promotion, back.promotions) == (12.5, 4.0, 9.0, 2)
    assert back.epoch_time_by_workers == {3: 7.5}
    assert (back.running_seconds_since_epoch, back.attained_gpu_seconds_since_epoch) == (
        6.5, 19.5)
    assert back.extra["user"] == "alice" and back.extra["profile"] == "ncf"
    engine.dispose()


def test_category_speed_settings_and_backend_state(store_url: str) -> None:
    engine = make_engine(store_url)
    migrate(engine)
    sessions = session_factory(engine)
    resnet_a100, resnet_v100, yolo = ("resnet", "a100"), ("resnet", "v100"), ("yolov3", "t4")
    with sessions.begin() as session:
        store.save_category_speed(session, resnet_a100, 2, 10.0, 1.0)
        store.save_category_speed(session, resnet_a100, 4, 6.0, 1.0)
        store.save_category_speed(session, resnet_v100, 2, 30.0, 1.0)
        store.save_algorithm(session, "a100", "FIFO", {})
        store.save_rate_limit(session, 3.0, "ElasticFIFO")
        store.save_backend_state(session, "emulated", {"runs": {"x": 1}}, 5.0)
    with sessions.begin() as session:  # updates replace, they do not add
        store.save_category_speed(session, resnet_a100, 2, 9.0, 2.0)
        store.save_algorithm(session, "a100", "ElasticFIFO", {})
        store.save_category_layout(session, yolo, (8, 2), 64.0, 2.0)
        store.save_category_layout(session, yolo, (8, 4), 90.0, 2.0)
    with sessions.begin() as session:
        store.save_category_layout(session, yolo, (8, 4), 96.0, 3.0)
    with sessions() as session:
        assert store.load_category_history(session) == {
            resnet_a100: {2: 9.0, 4: 6.0}, resnet_v100: {2: 30.0}}
        assert store.load_layout_history(session) == {yolo: {(8, 2): 64.0, (8, 4): 96.0}}
        settings = {row.gpu_type: row for row in store.load_settings(session)}
        assert settings["a100"].algorithm == "ElasticFIFO"
        assert settings[store.DEFAULT_SETTINGS_KEY].rate_limit_seconds == 3.0
        assert store.load_backend_state(session, "emulated") == {"runs": {"x": 1}}
        assert store.load_backend_state(session, "other") is None
    engine.dispose()


def test_store_functions_never_commit(store_url: str) -> None:
    engine = make_engine(store_url)
    migrate(engine)
    sessions = session_factory(engine)
    with sessions() as session:
        store.insert_jobs(session, [store.new_job_values(_record("b-1"), META, 1.0)])
        session.rollback()
    with sessions() as session:
        assert store.load_jobs(session) == []
    engine.dispose()


def test_head_revision_is_alembics_head() -> None:
    from alembic.script import ScriptDirectory

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    assert ScriptDirectory.from_config(config).get_current_head() == HEAD_REVISION


def to_revision(engine: sa.Engine, revision: str, down: bool = False) -> Config:
    """Migrate the store at `engine` up (or down) to `revision`; the Alembic config."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        (command.downgrade if down else command.upgrade)(config, revision)
    return config


def test_the_history_migration_keeps_existing_rows_under_the_default_gpu_type(
    store_url: str,
) -> None:
    """A store written before history was keyed by GPU type: nothing is lost."""
    engine = make_engine(store_url)
    to_revision(engine, "0002")
    with engine.begin() as connection:
        connection.execute(sa.text(
            "INSERT INTO category_speed (category, workers, epoch_seconds, updated_at) "
            "VALUES ('resnet', 2, 9.0, 1.0), ('resnet', 4, 6.0, 1.0)"))
        connection.execute(sa.text(
            "INSERT INTO category_layout (category, workers, nodes, samples_per_second, "
            "updated_at) VALUES ('yolov3', 8, 2, 64.0, 1.0)"))
        settings_table = sa.table("scheduler_settings", sa.column("gpu_type"),
                                  sa.column("algorithm"), sa.column("params", sa.JSON()))
        connection.execute(settings_table.insert().values(
            gpu_type="a100", algorithm="Tiresias",
            params={"service": "total", "starvation_knob": None}))
        values = store.new_job_values(_record("old-1"), META, 50.0)
        old_columns = {c["name"] for c in sa.inspect(connection).get_columns("jobs")}
        row = {k: v for k, v in values.items() if k in old_columns}
        row.update(attained_gpu_seconds=5000.0, running_seconds=1250.0)
        jobs = sa.table("jobs", *(sa.column(k, sa.JSON() if isinstance(v, dict | list) else None)
                                  for k, v in row.items()))
        connection.execute(jobs.insert().values(row))
    migrate(engine)
    assert current_revision(engine) == HEAD_REVISION
    sessions = session_factory(engine)
    with sessions() as session:
        assert store.load_category_history(session) == {("resnet", "default"): {2: 9.0, 4: 6.0}}
        assert store.load_layout_history(session) == {("yolov3", "default"): {(8, 2): 64.0}}
        (job,) = [store.row_to_record(r) for r in store.load_jobs(session)]
        settings = {row.gpu_type: row for row in store.load_settings(session)}
        assert settings["a100"].params == {"starvation_knob": None}, "a knob that is gone"
    # before any promotion, the service since the last promotion is the total
    assert job.attained_gpu_seconds_since_promotion == 5000.0
    assert job.running_seconds_since_promotion == 1250.0
    assert (job.waiting_seconds_since_promotion, job.promotions) == (0.0, 0)
    # unknown before: no epoch under way counted
    assert (job.running_seconds_since_epoch, job.attained_gpu_seconds_since_epoch) == (0.0, 0.0)
    with sessions.begin() as session:  # the new key: a second GPU type beside the old rows
        store.save_category_speed(session, ("resnet", "a100"), 2, 3.0, 2.0)
    with sessions() as session:
        assert store.load_category_history(session)[("resnet", "default")] == {2: 9.0, 4: 6.0}
    # and back down and up again: the default type's rows survive both ways
    to_revision(engine, "0002", down=True)
    migrate(engine)
    with sessions() as session:
        assert store.load_category_history(session) == {("resnet", "default"): {2: 9.0, 4: 6.0}}
    engine.dispose()
