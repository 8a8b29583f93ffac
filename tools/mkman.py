"""Writes one manual page from its source in docs/man/ (a little Markdown) and the texts
memtap already has, so nothing is said twice:

  @help [COMMAND]        the command's --help text: SYNOPSIS, DESCRIPTION, OPTIONS and
                         EXIT STATUS (without COMMAND, memtap's own SYNOPSIS)
  @commands              memtap's commands, from `memtap --complete commands`
  @include FILE#HEADING  the section of a Markdown file under a heading that starts so
  @api FILE              the C API of a header: its banners, prototypes and comments

The first line is `# NAME(SECTION)` and, after ` -- `, the NAME line's summary; a
subcommand's page takes its summary from `memtap --complete commands`.

  python3 tools/mkman.py MEMTAP VERSION SRCDIR SOURCE.md OUT
"""
import os
import re
import subprocess
import sys
import time


def esc(text):
    """Plain text as roff: backslashes, dashes of options, and no line begins a request."""
    text = text.replace("\\", "\\e")
    text = re.sub(r"(?<![A-Za-z0-9_-])-+(?=[A-Za-z])", lambda m: "\\-" * len(m.group(0)), text)
    return text


def line(text):
    return "\\&" + text if text.startswith((".", "'")) else text


def inline(text):
    """Markdown's inline marks: `code` and **bold** in bold, *emphasis* in italics, links as text."""
    out = []
    for i, part in enumerate(re.split(r"`([^`]*)`", text)):
        if i % 2:
            out.append("\\fB" + esc(part) + "\\fR")
            continue
        part = re.sub(r"\[([^\]]+)\]\([^)]+\)", r"\1", part)
        part = esc(part)
        part = re.sub(r"\*\*([^*]+)\*\*", r"\\fB\1\\fR", part)
        part = re.sub(r"(?<![\w*])\*([^*\s][^*]*)\*(?![\w*])", r"\\fI\1\\fR", part)
        out.append(part)
    return "".join(out)


def term(text):
    """An option's term: the option words bold, the placeholders (FILE, N) italic."""
    words = []
    for w in text.split(" "):
        m = re.match(r"^([-\w.=]*?)([A-Z][A-Z0-9_|.\[\]=,-]*)?([,]?)$", w)
        if w.startswith("-") and m:
            opt, arg, comma = m.groups()
            words.append("\\fB" + esc(opt) + "\\fR" + ("\\fI" + esc(arg) + "\\fR" if arg else "") + comma)
        elif re.fullmatch(r"[A-Z][A-Z0-9_|.\[\]=,-]*", w):
            words.append("\\fI" + esc(w) + "\\fR")
        else:
            words.append("\\fB" + esc(w) + "\\fR" if w else "")
    return " ".join(words)


def literal(lines):
    return [".PP", ".RS 4", ".nf"] + [line(esc(x)) for x in lines] + [".fi", ".RE"]


# ---- --help texts ----
def help_page(text, command):
    """SYNOPSIS, DESCRIPTION, OPTIONS and EXIT STATUS from a usage text."""
    lines = text.rstrip("\n").split("\n")
    synopsis = []
    while lines and (lines[0].startswith("usage:") or (synopsis and re.match(r"^\s+(memtap |\[)", lines[0]))):
        s = re.sub(r"^usage:\s*|^\s+", "", lines.pop(0))
        if s.startswith("[") and synopsis:
            synopsis[-1] += " " + s
        else:
            synopsis.append(s)
    description, options, status = [], [], []
    target = description
    i = 0
    while i < len(lines):
        ln = lines[i]
        stripped = ln.strip()
        indent = len(ln) - len(ln.lstrip(" "))
        if not stripped:
            i += 1
            continue
        if indent == 0:
            para = [stripped]
            i += 1
            while i < len(lines) and lines[i] and not lines[i].startswith(" ") and not para[-1].endswith(":") \
                    and not re.match(r"^[A-Z][A-Z ]+[,:]", lines[i]):
                para.append(lines[i].strip())
                i += 1
            para = " ".join(para)
            if re.fullmatch(r"[A-Z][A-Z ]+:", para):
                target += [".SS " + para[:-1]]
            elif re.match(r"^(The e|E)xit status", para):
                status += [".PP", inline_help(para)]
            else:
                target += [".PP", inline_help(para)]
            continue
        target = options
        m = re.match(r"^(\S.*?)\s{2,}(\S.*)$", stripped)
        d = re.match(r"^([\w-]+ \(default [^)]*\)):\s*(.*)$", stripped)
        if not m:
            m = re.match(r"^((?:-\w|--[\w-]+)(?:, --[\w-]+)?(?: [A-Z][\w=|.,<>\[\]-]*)?) ([a-z(].*)$", stripped)
        if d or (m and not m.group(2).startswith("-")):
            head, body = (d or m).groups()
            body = [body]
            i += 1
            while i < len(lines) and lines[i].strip() and len(lines[i]) - len(lines[i].lstrip(" ")) > indent:
                body.append(lines[i].strip())
                i += 1
            options += [".TP", term(head) if not d else "\\fB" + esc(head.split(" ")[0]) + "\\fR " +
                        esc(head.split(" ", 1)[1]), inline_help(" ".join(body))]
            continue
        block = []
        while i < len(lines) and lines[i].startswith(" ") and lines[i].strip() and \
                not re.match(r"^\s*\S.*?\s{2,}[^-\s]", lines[i]):
            block.append(lines[i].strip())
            i += 1
        if not block:
            block.append(stripped)
            i += 1
        options += literal(block)
    out = [".SH SYNOPSIS"]
    for s in synopsis:
        # a note after the synopsis, three spaces on
        s, note = (re.split(r"\s{3,}", s, 1) + [""])[:2]
        words = ["\\%" + esc(w) if "-" in w else esc(w) for w in s.split(" ")]
        out += [".PP"] if out[-1] != ".SH SYNOPSIS" else []
        out += ["\\fB%s\\fR %s" % (words[0], " ".join(words[1:])) + (" \\(em " + esc(note) if note else "")]
    out += [".SH DESCRIPTION"] + description
    if options:
        out += [".SH OPTIONS"] + options
    if status:
        out += [".SH EXIT STATUS"] + status
    return out


def inline_help(text):
    """Usage text's own marks: `code` as in Markdown."""
    return line(inline(text))


def main_synopsis():
    return [".SH SYNOPSIS", "\\fBmemtap\\fR \\fICOMMAND\\fR [\\fIARGS\\fR]", ".br",
            "\\fBmemtap\\fR \\fICOMMAND\\fR \\fB\\-\\-help\\fR"]


def main_commands(memtap):
    """memtap(1): the commands of `memtap --complete commands`, each with its page."""
    out = [".SH COMMANDS"]
    for row in run(memtap, "--complete", "commands").splitlines():
        name, about = row.split("\t")
        out += [".TP", "\\fBmemtap %s\\fR" % name, esc(about) +
                ("" if name == "version" else " (\\fBmemtap\\-%s\\fR(1))" % name)]
    return out


# ---- C headers ----
def api_page(path):
    """The header's banners, constants, enums and prototypes, each with its comment."""
    src = open(path).read()
    src = re.sub(r"(?s)#ifdef MEMTAP_BUILDING.*?#endif\n", "", src)
    src = re.sub(r"(?m)^#define MEMTAP_API.*\n", "", src)
    head = re.match(r"(?s)/\*(.*?)\*/", src)
    intro = " ".join(x.strip(" *") for x in head.group(1).split("\n")).strip()
    intro = re.sub(r"^memtap: [^.]*\.\s*", "", intro)
    protos, body = [], []
    comment = None
    pending = []

    def flush():
        if pending:
            body.extend([".PP", ".nf"] + ["\\fB" + esc(p) + "\\fR" for p in pending] + [".fi", ".RS 4"] +
                        ([inline(comment)] if comment else []) + [".RE"])
            del pending[:]

    for chunk in re.finditer(r"(?s)/\*(.*?)\*/|^(MEMTAP_API\w*\(.*?\))$|^(\w[^;#(]*\([^;]*\);)$|"
                             r"^(#define MEMTAP_\w+ [^\n]*)$|^(enum \w+ \{.*?\};)", src[head.end():], re.M):
        c, api, proto, define, enum = chunk.groups()
        if c is not None:
            text = " ".join(x.strip(" *") for x in c.split("\n")).strip()
            banner = re.match(r"^-+ (.*?) -+\s*(.*)$", text)
            flush()
            if banner:
                body += [".SS " + esc(banner.group(1))]
                comment = None
                if banner.group(2):
                    body += [".PP", inline(banner.group(2))]
            else:
                comment = text
            continue
        if api:
            m = re.match(r"MEMTAP_API\w*\((.*?), (\w+), \((.*?)\), \(.*?\)(, .*)?\)", api)
            p = "%s %s(%s);" % (m.group(1), m.group(2), m.group(3))
        elif proto:
            p = re.sub(r"\s+", " ", proto)
        elif define:
            flush()
            body.extend([".nf", "\\fB" + esc(define) + "\\fR", ".fi"])
            continue
        else:
            flush()
            body.extend([".PP", ".nf"] + [esc(x) for x in enum.split("\n")] + [".fi"])
            continue
        protos.append(p)
        pending.append(p)
    flush()
    return ([".SH SYNOPSIS", ".nf", "\\fB#include <memtap.h>\\fR", ""] + ["\\fB" + esc(p) + "\\fR" for p in protos] +
            [".fi", ".SH DESCRIPTION", ".PP", inline(intro), ".SH FUNCTIONS"] + body)


# ---- Markdown ----
def markdown(text, srcdir, shift=0):
    """The Markdown the docs use: headings, paragraphs, lists, tables, fenced code."""
    out = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        ln = lines[i]
        if not ln.strip():
            i += 1
            continue
        m = re.match(r"^(#+) (.*)$", ln)
        if m:
            level = len(m.group(1)) + shift
            out += [(".SH " + m.group(2).upper()) if level <= 2 else ".SS " + inline(m.group(2))]
            i += 1
            continue
        if ln.startswith("@include "):
            path, heading = ln[len("@include "):].split("#", 1)
            out += section(open(os.path.join(srcdir, path)).read(), heading, srcdir)
            i += 1
            continue
        if ln.startswith("```"):
            block = []
            i += 1
            while i < len(lines) and not lines[i].startswith("```"):
                block.append(lines[i])
                i += 1
            out += literal(block)
            i += 1
            continue
        if ln.startswith("|"):
            rows = []
            while i < len(lines) and lines[i].startswith("|"):
                cells = [c.strip() for c in re.split(r"(?<!\\)\|", lines[i].strip())[1:-1]]
                if not all(re.fullmatch(r":?-+:?", c) for c in cells):
                    rows.append(cells)
                i += 1
            header, rows = rows[0], rows[1:]
            for cells in rows:
                out += [".TP", line(inline(cells[0]))]
                for k, cell in enumerate(cells[1:], 1):
                    label = header[k] if k < len(header) and len(cells) > 2 else ""
                    if k > 1:
                        out.append(".br")
                    out.append(line(("\\fI%s:\\fR " % esc(label) if label else "") + inline(cell)))
            continue
        if re.match(r"^[-*] ", ln):
            while i < len(lines) and re.match(r"^[-*] ", lines[i]):
                item = [lines[i][2:].strip()]
                i += 1
                while i < len(lines) and lines[i].startswith("  ") and lines[i].strip():
                    item.append(lines[i].strip())
                    i += 1
                out += [".IP \\(bu 2", line(inline(" ".join(item)))]
            continue
        para = []
        while i < len(lines) and lines[i].strip() and not re.match(r"^(#|```|\||[-*] |@)", lines[i]):
            para.append(lines[i].strip())
            i += 1
        out += [".PP", line(inline(" ".join(para)))]
    return out


def section(text, heading, srcdir):
    """The part of a Markdown file under the heading that starts with `heading`."""
    lines = text.split("\n")
    for k, ln in enumerate(lines):
        m = re.match(r"^(#+) (.*)$", ln)
        if m and m.group(2).startswith(heading):
            level = len(m.group(1))
            end = k + 1
            while end < len(lines) and not re.match(r"^#{1,%d} " % level, lines[end]):
                end += 1
            return markdown("\n".join(lines[k + 1:end]), srcdir, shift=2 - level)
    sys.exit("mkman: no heading '%s'" % heading)


def run(*args):
    return subprocess.run(args, check=True, capture_output=True, text=True).stdout


def main():
    memtap, version, srcdir, source, out = sys.argv[1:6]
    text = open(source).read()
    first, rest = text.split("\n", 1)
    m = re.match(r"^# ([\w-]+)\((\d)\)(?: -- (.*))?$", first)
    if not m:
        sys.exit("mkman: %s: the first line is not '# NAME(SECTION) -- summary'" % source)
    name, sect, summary = m.groups()
    if summary is None:
        rows = dict(r.split("\t") for r in run(memtap, "--complete", "commands").splitlines())
        summary = rows[name[len("memtap-"):]]
    epoch = int(os.environ.get("SOURCE_DATE_EPOCH") or os.path.getmtime(source))
    date = time.strftime("%Y-%m-%d", time.gmtime(epoch))
    page = ['.\\" Generated by tools/mkman.py from %s: do not edit.' % os.path.relpath(source, srcdir),
            '.TH %s %s %s "memtap %s" "memtap manual"' % (name.upper(), sect, date, version),
            ".nh", ".ad l", ".SH NAME", "%s \\- %s" % (esc(name), esc(summary))]
    lines = rest.split("\n")
    md = []

    def flush():
        page.extend(markdown("\n".join(md), srcdir))
        del md[:]

    for ln in lines:
        if ln.startswith("@help"):
            flush()
            cmd = ln.split()[1:]
            page.extend(help_page(run(memtap, *cmd, "--help"), cmd[0]) if cmd else main_synopsis())
        elif ln.startswith("@commands"):
            flush()
            page.extend(main_commands(memtap))
        elif ln.startswith("@api "):
            flush()
            page.extend(api_page(os.path.join(srcdir, ln.split()[1])))
        else:
            md.append(ln)
    flush()
    with open(out + ".tmp", "w") as f:
        f.write("\n".join(page) + "\n")
    os.replace(out + ".tmp", out)


main()
