"""Settings take each value as the type it is meant to be, from files, the environment and flags alike, and an
error quotes at most a line of the value it refuses."""
import pytest

from gpufleet.settings import MAX_QUOTED, SettingsError, load_settings


def refused(tmp_path, text: str, monkeypatch=None, **env) -> str:
    cfg = tmp_path / "gpufleet.toml"
    cfg.write_text(text)
    if monkeypatch is not None:
        for name, value in env.items():
            monkeypatch.setenv(name, value)
    with pytest.raises(SettingsError) as err:
        load_settings(str(cfg))
    message = str(err.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize("text, setting", [
    ("[kafka]\npartitions = true\n", "kafka.partitions"),
    ("[worker]\nsession_timeout_s = true\n", "worker.session_timeout_s"),
    ("[stream]\nlateness_s = false\n", "stream.lateness_s"),
    ("[stream.hold_down_s]\nidle = true\n", "stream.hold_down_s.idle"),
    ("[scale.pools.west]\nmin_gpus = true\n", "pools.west.min_gpus"),
    ("[billing]\nmax_gap_s = true\n", "billing.max_gap_s"),
])
def test_a_boolean_is_not_a_number(tmp_path, text, setting):
    message = refused(tmp_path, text)
    assert setting in message and "boolean true" in message or "boolean false" in message, message


@pytest.mark.parametrize("text, setting", [
    ("[kafka]\nbootstrap = 9092\n", "kafka.bootstrap"),
    ("[billing]\ncurrency = 978\n", "billing.currency"),
    ("[store]\ndatabase = true\n", "store.database"),
    ("[collect]\npool = [\"a\"]\n", "collect.pool"),
    ("[billing.tenants]\nacme = 3\n", "billing.tenants.acme"),
])
def test_only_a_string_is_a_string(tmp_path, text, setting):
    message = refused(tmp_path, text)
    assert setting in message and "not a string" in message, message


def test_a_section_that_is_not_a_table_is_refused_even_where_the_environment_sets_it(tmp_path, monkeypatch):
    message = refused(tmp_path, "store = 5\n", monkeypatch, GPUFLEET_STORE__DSN="http://127.0.0.1:8123")
    assert message.startswith("setting store: 5 is not a table"), message


def test_flags_are_held_to_the_same_types(tmp_path):
    with pytest.raises(SettingsError, match="store.batch_rows: the boolean true is not a number"):
        load_settings(None, store={"batch_rows": True})


def test_values_of_their_own_type_and_numbers_written_as_strings_still_load(tmp_path, monkeypatch):
    cfg = tmp_path / "gpufleet.toml"
    cfg.write_text("[stream]\nraw_samples = false\nlateness_s = 12\n[kafka]\npartitions = 8\n"
                   "[scale.pools.west]\ndry_run = true\nmin_gpus = 2\n")
    monkeypatch.setenv("GPUFLEET_WORKER__BATCH_MAX", "500")
    s = load_settings(str(cfg))
    assert (s.stream.raw_samples, s.stream.lateness_s, s.kafka.partitions, s.worker.batch_max) == (False, 12, 8, 500)
    assert s.scale.policy("west").dry_run is True and s.scale.policy("west").min_gpus == 2


def test_an_error_quotes_at_most_a_line_of_a_huge_value(monkeypatch):
    monkeypatch.setenv("GPUFLEET_KAFKA__PARTITIONS", "x" * 50_000)
    with pytest.raises(SettingsError) as err:
        load_settings(None)
    message = str(err.value)
    assert "kafka.partitions" in message and "GPUFLEET_KAFKA__PARTITIONS" in message
    assert len(message) < MAX_QUOTED + 300 and "49,800 more characters" in message, message
    monkeypatch.delenv("GPUFLEET_KAFKA__PARTITIONS")
    monkeypatch.setenv("GPUFLEET_SCALE__POOLS", "{" + "x" * 50_000)
    with pytest.raises(SettingsError) as err:
        load_settings(None)
    assert len(str(err.value)) < 3 * MAX_QUOTED and "scale" in str(err.value), str(err.value)
