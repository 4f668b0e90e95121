"""fastbean(1) and fastbean-ctl(1), written from what parses the flags: the
server's option table (options.py) and fastbean-ctl's argparse parser.

`python -m fastbean.manpages DIR` writes both into DIR; the tree keeps them
in man/, from where the package installs them into share/man/man1 (so `man
fastbean` works wherever the package's bin/ is on PATH), and
tests/operations/test_options.py fails when they differ from what this writes.
"""
import argparse
import os
import sys

from fastbean.options import OPTIONS, SECTIONS

SERVER_DESCRIPTION = """\
fastbean is a work-queue server that speaks the beanstalk protocol of beanstalkd 1.12 byte for
byte, with its flags, exit statuses and binlog format, so it replaces beanstalkd under the
clients, service files and binlog directories made for it. It adds TLS listeners with tokens and
roles, Prometheus metrics and health endpoints, JSON logs, memory and connection caps, protocol
extensions (which --strict turns off) and high availability over NATS JetStream."""

SIGNALS = [
    ("SIGTERM, SIGINT", "stop accepting, write what is owed to clients, exit 0"),
    ("SIGUSR1", "drain mode: put answers DRAINING; logged as drained once no job is reserved"),
    ("SIGUSR2", "end drain mode (with --strict it ends the process, as it ends beanstalkd)"),
    ("SIGHUP", "with TLS: read the certificates, CAs and tokens again; without TLS it ends the "
               "process, as it ends beanstalkd"),
]

EXIT_STATUSES = [
    ("0", "stopped by SIGTERM or SIGINT, or --help, --version"),
    ("1", "the binlog could not be replayed or grown at start, or a crash"),
    ("5", "a bad command line"),
    ("10", "the binlog directory cannot be used (missing, not writable, locked)"),
    ("32, 33, 34", "-u: the user database could not be read, no such user, cannot switch"),
    ("74", "the binlog's disk kept failing while serving"),
    ("78", "a configuration error: certificates, tokens, NATS servers that cannot hold the stream"),
    ("111", "cannot listen: a bad address, a port in use or not allowed"),
]

CTL_DESCRIPTION = """\
fastbean-ctl looks into and acts on a running fastbean (or beanstalkd) over the beanstalk
protocol: server and tube statistics, a live top, jobs by state, peeks, kicks, pauses, puts,
flushes and the other protocol extensions. It speaks TLS with the server's --tls-listen,
client certificates and tokens included."""


def roff(text):
    """Text as troff sees it: backslashes and hyphens escaped, no line
    starting with a control character."""
    text = text.replace("\\", "\\e").replace("-", "\\-")
    return "\n".join(("\\&" + line if line[:1] in (".", "'") else line) for line in text.split("\n"))


def _head(name, section_title):
    return ['.TH %s 1 "" "fastbean" "%s"' % (name.upper(), section_title), ".SH NAME",
            roff("%s" % name) + " \\- " + roff(
                "a drop-in replacement for beanstalkd" if name == "fastbean"
                else "inspect and operate a fastbean or beanstalkd server")]


def _item(term, body):
    return [".TP", term, roff(body)]


def server_page():
    out = _head("fastbean", "User Commands")
    out += [".SH SYNOPSIS", ".B fastbean", "[\\fIOPTIONS\\fR]", ".SH DESCRIPTION", roff(SERVER_DESCRIPTION)]
    for section, title in SECTIONS.items():
        out += [".SH " + roff(title.split(" (")[0].upper())]
        if " (" in title:
            out.append(roff("(" + title.split(" (", 1)[1]))
        for option in OPTIONS:
            if option.section == section:
                term = "\\fB%s\\fR" % roff(option.flag)
                if option.metavar:
                    term += " \\fI%s\\fR" % roff(option.metavar)
                out += _item(term, option.described())
    out += [".SH SIGNALS"]
    for sig, meaning in SIGNALS:
        out += _item("\\fB%s\\fR" % sig, meaning)
    out += [".SH EXIT STATUS"]
    for status, meaning in EXIT_STATUSES:
        out += _item("\\fB%s\\fR" % status, meaning)
    out += [".SH SEE ALSO", "\\fBfastbean\\-ctl\\fR(1), \\fBbeanstalkd\\fR(1); the docs installed with "
            "the package, share/doc/fastbean/index.md under its prefix (every flag: configuration.md), "
            "as \\fBfastbean \\-\\-help\\fR says."]
    return "\n".join(out) + "\n"


def _actions(parser):
    """(synopsis, help) of each optional and positional argument of parser."""
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)) or action.help == argparse.SUPPRESS:
            continue
        metavar = action.metavar or (action.dest.upper() if action.nargs != 0 else None)
        names = ", ".join(action.option_strings) if action.option_strings else metavar
        if action.option_strings and action.nargs != 0:
            names += " " + metavar
        yield names, action.help or ""


def ctl_page(parser=None):
    from fastbean.ctl.main import build_parser
    parser = parser or build_parser()
    out = _head("fastbean-ctl", "User Commands")
    out += [".SH SYNOPSIS", ".B fastbean\\-ctl", "\\fICOMMAND\\fR [\\fIOPTIONS\\fR] [\\fIARGUMENTS\\fR]",
            ".SH DESCRIPTION", roff(CTL_DESCRIPTION)]
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    helps = {choice.dest: choice.help for choice in commands._choices_actions}
    common = None
    out += [".SH COMMANDS"]
    for name, sub in commands.choices.items():
        items = list(_actions(sub))
        if common is None:
            common = [item for item in items if item[0].startswith(("-l", "-p", "--timeout", "--json",
                                                                    "--tls", "--auth"))]
        own = [item for item in items if item not in common]
        usage = " ".join(["\\fB%s\\fR" % roff(name)] + ["[\\fI%s\\fR]" % roff(n) if n.startswith("-")
                                                         else "\\fI%s\\fR" % roff(n) for n, _ in own])
        out += [".TP", usage, roff(helps.get(name) or "")]
        for names, text in own:
            out += [".RS", ".TP", "\\fB%s\\fR" % roff(names), roff(text), ".RE"]
    out += [".SH OPTIONS", roff("Every command takes these:")]
    for names, text in common or []:
        out += _item("\\fB%s\\fR" % roff(names), text)
    out += [".SH EXIT STATUS"]
    for status, meaning in exit_statuses(parser.epilog):
        out += _item("\\fB%s\\fR" % status, meaning)
    out += [".SH NOTES", roff(parser.epilog.split("\n\n")[0]),
            ".SH SEE ALSO", "\\fBfastbean\\fR(1); fastbean\\-ctl.md in the docs installed with the "
            "package (share/doc/fastbean under its prefix)."]
    return "\n".join(out) + "\n"


def exit_statuses(epilog):
    """[(status, meaning)] from the "exit status:" part of --help's epilog."""
    entries = []
    for line in epilog.split("exit status:", 1)[1].splitlines():
        number, _, text = line.strip().partition("  ")
        if number.isdigit():
            entries.append((number, text.strip()))
        elif line.strip() and entries:
            entries[-1] = (entries[-1][0], entries[-1][1] + " " + line.strip())
    return entries


PAGES = {"fastbean.1": server_page, "fastbean-ctl.1": ctl_page}


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        sys.stderr.write("usage: python -m fastbean.manpages DIR\n")
        return 2
    os.makedirs(argv[0], exist_ok=True)
    for name, page in PAGES.items():
        with open(os.path.join(argv[0], name), "w", encoding="utf-8") as f:
            f.write(page())
    return 0


if __name__ == "__main__":
    sys.exit(main())
