"""Logs: stderr as text or JSON lines, the levels -V selects, and named events.

Every line an operator may act on is an event: a name (`bind`, `replay`,
`memory-cap-reached`, ...) and fields. The text format shows the sentence
built from the fields; the JSON format gives one object per line with
`time`, `level`, `event`, the fields and that sentence as `message`.
"""
import json
import logging
import sys
import time
from typing import Any

FORMATS = ("text", "json")
TEXT_PREFIX = "fastbean: "

log = logging.getLogger("fastbean")


def event(level: int, name: str, text: str, exc_info: Any = None, **fields: Any) -> None:
    """Log event `name`; `text` may refer to the fields as %(field)s; exc_info
    as in logging (True: the exception being handled, with its traceback)."""
    if fields:
        log.log(level, text, fields, extra={"event": name}, exc_info=exc_info)
    else:
        log.log(level, text, extra={"event": name}, exc_info=exc_info)


def counted(n, noun, nouns=None):
    """`1 job`, `0 jobs`, `2 jobs`: a count and its noun, in good English."""
    return "%d %s" % (n, noun if n == 1 else nouns or noun + "s")


def level_for(verbosity):
    """The default level shows every event; -V adds connections, -VV every read and reply."""
    return logging.DEBUG if verbosity else logging.INFO


class JsonFormatter(logging.Formatter):
    RESERVED = ("time", "level", "event", "message")

    def format(self, record):
        t = record.created
        obj = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + ".%03dZ" % (t % 1 * 1000),
            "level": record.levelname.lower(),
            "event": getattr(record, "event", "message"),
        }
        if isinstance(record.args, dict):
            for k, v in record.args.items():
                obj[k if k not in self.RESERVED else "field_" + k] = v
        obj["message"] = record.getMessage()
        if record.exc_info:
            obj["exception"] = self.formatException(record.exc_info)
        return json.dumps(obj, default=str, ensure_ascii=False)


def setup(fmt="text", verbosity=0, stream=None):
    """(Re)configure the fastbean logger: format, level, one stderr handler."""
    handler = logging.StreamHandler(stream or sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter(TEXT_PREFIX + "%(message)s"))
    for old in list(log.handlers):
        log.removeHandler(old)
    log.addHandler(handler)
    log.propagate = False
    log.setLevel(level_for(verbosity))
