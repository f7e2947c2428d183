"""The local-cluster kit: start, stop, kill, pause and restart Raftka processes on this machine.

Rooms: ``ports`` (free ports, the port plan), ``process`` (one process class whose output sink
is a parameter: a pipe read by a thread, or a log file that outlives its starter), ``state``
(server.properties, meta.properties, cluster.json, the lock), ``clusters`` (ControllerCluster,
Cluster), ``controller_client`` (blocking DescribeQuorum and controller requests) and ``errors``.
The names below are the kit's API: ``from raftka.cluster import Cluster, wait_until, ...``.
It imports the client only lazily (to see brokers unfenced) and starts servers by command line.
"""
from raftka.cluster.clusters import (DEFAULT_BASE_PORT, DEFAULT_DIR, PROGRESS_EVERY_S, Cluster, ControllerCluster,
                                     NodeSpec, local_bootstrap_servers)
from raftka.cluster.errors import ClusterError, NodeExitedError, NoClusterError, PortInUseError
from raftka.cluster.ports import PORT_MAX, PORT_MIN, PortPlan, free_port_block, free_ports, port_is_free
from raftka.cluster.process import (LOG, OUTPUT_LINES_MAX, PIPE, READY_TIMEOUT_S, STOP_TIMEOUT_S, Process, pid_is_ours,
                                    pid_state, project_env, python_argv, stop_all, stop_together, wait_until)
from raftka.cluster.state import (LOCK_FILE, META_PROPERTIES, STATE_FILE, STATE_VERSION, new_cluster_id,
                                  read_properties, state_lock, write_properties)

__all__ = [
    "Cluster", "ControllerCluster", "NodeSpec", "local_bootstrap_servers", "DEFAULT_BASE_PORT", "DEFAULT_DIR",
    "PROGRESS_EVERY_S",
    "ClusterError", "NodeExitedError", "NoClusterError", "PortInUseError",
    "PORT_MAX", "PORT_MIN", "PortPlan", "free_port_block", "free_ports", "port_is_free",
    "LOG", "OUTPUT_LINES_MAX", "PIPE", "READY_TIMEOUT_S", "STOP_TIMEOUT_S", "Process", "pid_is_ours", "pid_state",
    "project_env", "python_argv", "stop_all", "stop_together", "wait_until",
    "LOCK_FILE", "META_PROPERTIES", "STATE_FILE", "STATE_VERSION", "new_cluster_id", "read_properties",
    "state_lock", "write_properties",
]
