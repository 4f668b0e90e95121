"""Clients of the beanstalk protocol, for any beanstalkd or fastbean server.

Client (blocking) and AsyncClient (asyncio) have the same commands, read
through one table (_protocol); Pool and AsyncPool spread tubes over several
nodes. fastbean-ctl talks through Client, fastbean.testing.Server.client()
hands one out, the worker runs on AsyncClient. A leaf: it imports nothing of
fastbean but its errors.
"""
from fastbean.client._async import AsyncClient
from fastbean.client._pool import AsyncPool, Node, Pool, PoolJob, node_key, owner
from fastbean.client._protocol import (
    BODY_REPLIES,
    DEFAULT_PRI,
    DEFAULT_TTR,
    ERROR_CLASSES,
    ERROR_REPLIES,
    MAX_BODY,
    MAX_REPLY_LINE,
    NAME_CHARS,
    NAME_MAX,
    PEEK_STATES,
    PIPELINE,
    STATS_TEXT_KEYS,
    TEXT_KEYS,
    TIMEOUT,
    Address,
    Backoff,
    BadFormat,
    Buried,
    ClientError,
    ConnectError,
    ConnectionLost,
    DeadlineSoon,
    Draining,
    ExpectedCrlf,
    InternalError,
    Job,
    JobTooBig,
    ListedJob,
    NoPrimary,
    NoReply,
    NotAuthenticated,
    NotFound,
    NotIgnored,
    NotPermitted,
    OutOfMemory,
    ProtocolError,
    ServerError,
    Stats,
    TimedOut,
    UnexpectedReply,
    UnknownCommand,
    addresses_of,
    check_tube,
    describe,
    parse_address,
    parse_dict,
    parse_list,
    tls_context,
)
from fastbean.client._sync import Client

__all__ = ["Client", "AsyncClient", "Pool", "AsyncPool", "PoolJob", "Job", "Backoff", "Node",
           "ClientError", "ConnectError", "NoPrimary", "ProtocolError", "ConnectionLost", "NoReply",
           "ServerError", "NotFound", "BadFormat", "UnknownCommand", "OutOfMemory", "InternalError",
           "ExpectedCrlf", "JobTooBig", "Draining", "NotIgnored", "DeadlineSoon", "TimedOut",
           "NotAuthenticated", "NotPermitted", "Buried", "UnexpectedReply",
           "parse_dict", "parse_list", "parse_address", "addresses_of", "check_tube", "describe", "tls_context",
           "node_key", "owner", "Address", "Stats", "ListedJob",
           "TIMEOUT", "PIPELINE", "PEEK_STATES", "DEFAULT_PRI", "DEFAULT_TTR", "NAME_MAX", "NAME_CHARS",
           "MAX_REPLY_LINE", "MAX_BODY", "ERROR_REPLIES", "ERROR_CLASSES", "BODY_REPLIES", "TEXT_KEYS",
           "STATS_TEXT_KEYS"]
