"""The error table and declared configs: codes match Kafka's, bad values name the key."""
import pytest

from raftka.common import errors
from raftka.common.configs import TOPIC_CONFIGS, ConfigDef


def test_error_codes_match_kafkas_numbers():
    assert errors.CODES["NOT_LEADER_OR_FOLLOWER"] == 6
    assert errors.CODES["OFFSET_OUT_OF_RANGE"] == 1
    assert errors.CODES["NOT_ENOUGH_REPLICAS"] == 19
    assert errors.CODES["FENCED_LEADER_EPOCH"] == 74
    assert errors.CODES["NOT_CONTROLLER"] == 41


def test_every_code_has_its_own_exception_class_carrying_the_code():
    seen = set()
    for code, spec in errors.SPECS.items():
        cls = errors.for_code(code)
        assert cls.code == code and cls.name == spec.name and cls.retriable == spec.retriable
        assert cls not in seen
        seen.add(cls)
    error = errors.error_for(6, topic="orders", partition=3)
    assert isinstance(error, errors.NotLeaderOrFollowerError)
    assert error.retriable and error.invalid_metadata
    assert (error.topic, error.partition) == ("orders", 3)
    assert "orders-3" in str(error)


def test_unknown_code_maps_to_unknown_server_error():
    assert errors.for_code(9999) is errors.UnknownServerError


def test_corrupt_record_error_reports_both_crcs():
    error = errors.CorruptRecordError("batch at 0", stored_crc=0xDEADBEEF, computed_crc=0x1)
    assert error.code == errors.CODES["CORRUPT_MESSAGE"]
    assert "0xdeadbeef" in str(error) and "0x00000001" in str(error)


def test_topic_configs_parse_strings_to_typed_values_with_defaults():
    values = TOPIC_CONFIGS.parse({"segment.bytes": "2048", "unclean.leader.election.enable": "true"})
    assert values["segment.bytes"] == 2048
    assert values["unclean.leader.election.enable"] is True
    assert values["retention.ms"] == 604800000


@pytest.mark.parametrize("key,value,words", [
    ("segment.bytes", "lots", "expected an integer"),
    ("segment.bytes", "1", "must be >= 14"),
    ("min.insync.replicas", 0, "must be >= 1"),
    ("cleanup.policy", "bogus", "items must be among delete, compact"),
    ("unclean.leader.election.enable", "yes", "true or false"),
    ("segment.bytes", str(2**40), "32-bit"),
    ("no.such.key", "1", "unknown configuration key"),
])
def test_bad_config_values_are_refused_with_a_message_naming_the_key(key, value, words):
    with pytest.raises(errors.ConfigError) as info:
        TOPIC_CONFIGS.parse({key: value})
    assert info.value.key == key
    assert key in str(info.value) and words in str(info.value)


def test_required_keys_must_be_given():
    from raftka.common.configs import REQUIRED
    definition = ConfigDef().define("node.id", "int", REQUIRED, "this node's id")
    with pytest.raises(errors.ConfigError, match="node.id: is required"):
        definition.parse({})
