"""Kafka's client properties (a --command-config file, Spark's kafka.* options) as client
keywords (client/properties.py)."""
import pytest

from raftka.client.aio.admin import DEFAULTS as ADMIN_DEFAULTS
from raftka.client.aio.producer import DEFAULTS as PRODUCER_DEFAULTS
from raftka.client.properties import client_configs, parse_jaas_config
from raftka.common.errors import ConfigError
from raftka.common.server_config import parse_properties

SECURE = '''
# written for the Java tools
bootstrap.servers=127.0.0.1:9093
security.protocol=SASL_SSL
sasl.mechanism=SCRAM-SHA-512
sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\
username="alice" password="s3cr\\"et";
ssl.truststore.type=PEM
ssl.truststore.location=/etc/raftka/ca.pem
ssl.endpoint.identification.algorithm=
request.timeout.ms=15000
'''


def _known_with_security(defaults):
    # the security keys (security_protocol, ssl_*, sasl_*) as the clients declare them
    return {**defaults, "security_protocol": "PLAINTEXT", "ssl_cafile": None, "ssl_check_hostname": True,
            "sasl_mechanism": None, "sasl_plain_username": None, "sasl_plain_password": None,
            "ssl_certfile": None, "ssl_keyfile": None, "ssl_password": None}


def test_a_java_tools_file_becomes_kafka_python_keywords():
    props = parse_properties(SECURE)
    configs = client_configs(props, _known_with_security(ADMIN_DEFAULTS))
    assert configs == {"bootstrap_servers": "127.0.0.1:9093", "security_protocol": "SASL_SSL",
                       "sasl_mechanism": "SCRAM-SHA-512", "sasl_plain_username": "alice",
                       "sasl_plain_password": 's3cr"et', "ssl_cafile": "/etc/raftka/ca.pem",
                       "ssl_check_hostname": False, "request_timeout_ms": 15000}


def test_values_take_the_type_of_the_keys_default():
    configs = client_configs({"linger.ms": "20", "enable.idempotence": "false", "acks": "1",
                              "key.serializer": "org.apache.kafka.common.serialization.StringSerializer"},
                             PRODUCER_DEFAULTS)
    assert configs == {"linger_ms": 20, "enable_idempotence": False, "acks": "1"}
    with pytest.raises(ConfigError, match="linger.ms: expected an integer"):
        client_configs({"linger.ms": "soon"}, PRODUCER_DEFAULTS)


def test_a_pem_keystore_gives_the_certificate_and_the_key():
    configs = client_configs({"ssl.keystore.type": "PEM", "ssl.keystore.location": "/k/client.pem",
                              "ssl.key.password": "pw"}, _known_with_security(ADMIN_DEFAULTS))
    assert configs == {"ssl_certfile": "/k/client.pem", "ssl_keyfile": "/k/client.pem", "ssl_password": "pw"}


@pytest.mark.parametrize("props, problem", [
    ({"ssl.truststore.type": "JKS"}, "only PEM files"),
    ({"ssl.truststore.password": "x"}, "has no password"),
    ({"no.such.key": "1"}, "no.such.key: not a config this client takes"),
    ({"sasl.jaas.config": 'com.example.Login required username="a" password="b";'}, "login module"),
    ({"sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule required username="a";'},
     "has no password"),
    ({"sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule required password="hunter2"'},
     "must end with"),
    ({"ssl.endpoint.identification.algorithm": "none"}, "https or empty"),
])
def test_what_a_client_cannot_take_is_refused_by_name_without_echoing_secrets(props, problem):
    with pytest.raises(ConfigError, match=problem) as raised:
        client_configs(props, _known_with_security(ADMIN_DEFAULTS))
    assert "hunter2" not in str(raised.value)


def test_jaas_options_quoted_and_bare():
    options = parse_jaas_config('org.apache.kafka.common.security.plain.PlainLoginModule required '
                                'username=bob password="a b\\\\c" extra = "x";')
    assert options == {"username": "bob", "password": "a b\\c", "extra": "x"}


def test_properties_files_continue_lines_ending_in_a_backslash_as_java_reads_them():
    props = parse_properties("a=one \\\n    two\nb=ends in a backslash \\\\\nc = 3\n# c=4\n")
    assert props == {"a": "one two", "b": "ends in a backslash \\\\", "c": "3"}
