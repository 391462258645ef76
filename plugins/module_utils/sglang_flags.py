# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ddtree.fleet developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The flag contract of an installed SGLang, read statically (no import: SGLang needs torch and a GPU).

SGLang 0.5.23 derives its CLI from annotated fields (sglang/srt/arg_groups/fields/*.py, through
arg_utils.add_cli_args_from_dataclass) plus a few hand-written add_argument calls in
server_args.ServerArgs.add_cli_args. This module walks the same sources with the ast module and
rebuilds what argparse would accept: every option string, whether it takes a value, its type and
choices. Speculative algorithms come from the SpeculativeAlgorithm enum and from every
register(...) call in the package, so a patch series that registers DDTREE (and adds
--speculative-ddtree-budget as a field) makes both valid here without code changes.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ast
import difflib
import glob
import hashlib
import json
import os
import re

from ansible_collections.ddtree.fleet.plugins.module_utils.fs import atomic_write

REGISTER = re.compile(r"""(?:SpeculativeAlgorithm\.register|register_algorithm)\(\s*["']([A-Za-z0-9_]+)["']""")
# Values the server checks after parsing (not argparse choices) that are cheap to check early.
SEMANTIC_CHOICES = {"speculative_draft_attention_backend": "DRAFT_ATTENTION_BACKEND_CHOICES"}
# Functions that produce the choices of the hand-written parser options, and where their lists live.
DYNAMIC_CHOICES = {
    "_reasoning_parser_choices": ("srt/parser/reasoning_parser_names.py", "REASONING_PARSER_NAMES"),
    "_tool_call_parser_choices": ("srt/function_call/parser_names.py", "TOOL_CALL_PARSER_NAMES"),
}


class ContractError(Exception):
    pass


def _eval(node, env):
    """Evaluate literal-ish constant expressions; raises ValueError on anything else."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return [_eval(e, env) for e in node.elts]
    if isinstance(node, ast.Name):
        if node.id in env:
            return env[node.id]
        raise ValueError(node.id)
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.BitOr)):
        left, right = _eval(node.left, env), _eval(node.right, env)
        return list(left) + [x for x in right if x not in left]
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        if node.func.id in DYNAMIC_CHOICES and node.func.id in env:
            return env[node.func.id]
        if node.func.id in ("set", "frozenset", "list", "sorted", "tuple") and len(node.args) == 1:
            return list(_eval(node.args[0], env))
        if node.func.id in ("set", "frozenset", "list") and not node.args:
            return []
    if isinstance(node, ast.ListComp) and len(node.generators) == 1:
        raise ValueError("comprehension")
    raise ValueError(ast.dump(node)[:60])


def _constants(tree, env):
    """Module-level NAME = <constant expression> assignments, evaluated in order."""
    out = dict(env)
    for stmt in tree.body:
        targets, value = [], None
        if isinstance(stmt, ast.Assign):
            targets, value = [t for t in stmt.targets if isinstance(t, ast.Name)], stmt.value
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value is not None:
            targets, value = [stmt.target], stmt.value
        for t in targets:
            try:
                out[t.id] = _eval(value, out)
            except ValueError:
                pass
    return out


def _parse(path):
    with open(path, "rb") as f:
        return ast.parse(f.read(), filename=path)


def _dotted(node):
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return "%s.%s" % (_dotted(node.value), node.attr)
    return ""


def _subscript_parts(node):
    """Annotated[...] / Optional[...] / Literal[...] -> (name, [elements])."""
    inner = node.slice
    if hasattr(ast, "Index") and isinstance(inner, getattr(ast, "Index")):  # Python < 3.9
        inner = inner.value
    elts = inner.elts if isinstance(inner, ast.Tuple) else [inner]
    return _dotted(node.value).split(".")[-1], elts


def _type_info(node):
    """A field's type annotation -> (kind, type name, literal choices)."""
    while True:
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):  # X | None
            node = node.left if not (isinstance(node.left, ast.Constant) and node.left.value is None) else node.right
            continue
        if isinstance(node, ast.Subscript):
            name, elts = _subscript_parts(node)
            if name == "Optional":
                node = elts[0]
                continue
            if name == "Union":
                rest = [e for e in elts if not (isinstance(e, ast.Constant) and e.value is None)]
                if len(rest) == 1:
                    node = rest[0]
                    continue
                return "value", "str", None
            if name == "Literal":
                vals = [e.value for e in elts if isinstance(e, ast.Constant)]
                return "value", type(vals[0]).__name__ if vals else "str", vals
            if name in ("list", "List"):
                return "list", _type_info(elts[0])[1] if elts else "str", None
            return "value", "str", None
        if isinstance(node, ast.Name):
            if node.id == "bool":
                return "flag", "bool", None
            return "value", node.id if node.id in ("int", "float", "str") else "str", None
        return "value", "str", None


def _option(names, dest, kind, typ, choices, source, deprecated=False):
    return {"names": names, "dest": dest, "kind": kind, "type": typ,
            "choices": [str(c) for c in choices] if choices is not None else None,
            "deprecated": deprecated, "source": source}


def _field_options(path, env, rel):
    tree = _parse(path)
    env = _constants(tree, env)
    for cls in [n for n in tree.body if isinstance(n, ast.ClassDef)]:
        for stmt in cls.body:
            if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)
                    and isinstance(stmt.annotation, ast.Subscript)):
                continue
            name, elts = _subscript_parts(stmt.annotation)
            if name not in ("A", "Annotated") or len(elts) < 2:
                continue
            meta = None
            for e in elts[1:]:
                if isinstance(e, ast.Constant) and isinstance(e.value, str):
                    meta = {}
                    break
                if isinstance(e, ast.Call) and _dotted(e.func).split(".")[-1] == "Arg":
                    meta = dict((k.arg, k.value) for k in e.keywords if k.arg)
                    break
            if meta is None:
                continue
            field = stmt.target.id
            if isinstance(meta.get("no_cli"), ast.Constant) and meta["no_cli"].value:
                continue
            cli = meta["cli_name"].value if isinstance(meta.get("cli_name"), ast.Constant) else "--" + field.replace("_", "-")
            names = [cli]
            if "aliases" in meta:
                try:
                    names += _eval(meta["aliases"], env)
                except ValueError:
                    pass
            kind, typ, choices = _type_info(elts[0])
            if "choices" in meta:
                try:
                    choices = _eval(meta["choices"], env)
                except ValueError:
                    choices = None
            if field in SEMANTIC_CHOICES and choices is None:
                choices = env.get(SEMANTIC_CHOICES[field])
            action = _dotted(meta["action"]) if "action" in meta else ""
            if action.endswith("BooleanOptionalAction"):
                names += ["--no-" + n[2:] for n in names]
                kind, typ, choices = "flag", "bool", None
            elif action:
                kind, typ, choices = "custom", "str", None
            elif "type_parser" in meta:
                parser = _dotted(meta["type_parser"])
                typ = "json" if parser in ("json.loads", "json_list_type") else "str"
                kind = "value" if kind != "flag" else "value"
            if isinstance(meta.get("nargs"), ast.Constant) and kind != "flag":
                kind = "list" if meta["nargs"].value in ("*", "+") else ("optional" if meta["nargs"].value == "?" else kind)
            yield _option(names, field, kind, typ, choices, "%s:%d" % (rel, stmt.lineno))


def _handwritten_options(path, env, rel):
    tree = _parse(path)
    env = _constants(tree, env)
    for fn in ast.walk(tree):
        if not (isinstance(fn, ast.FunctionDef) and fn.name == "add_cli_args"):
            continue
        local = dict(env)
        for node in ast.walk(fn):
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                try:
                    local[node.targets[0].id] = _eval(node.value, local)
                except ValueError:
                    pass
        for node in ast.walk(fn):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument"):
                continue
            names = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            if not names or not names[0].startswith("-"):
                continue
            kw = dict((k.arg, k.value) for k in node.keywords if k.arg)
            action = _dotted(kw["action"]) if "action" in kw and not isinstance(kw["action"], ast.Constant) else (
                kw["action"].value if "action" in kw else "")
            deprecated = "Deprecated" in action or "Deprecated" in str(getattr(kw.get("help"), "value", ""))
            choices = None
            if "choices" in kw:
                try:
                    choices = _eval(kw["choices"], local)
                except ValueError:
                    choices = None
            typ = _dotted(kw["type"]) if "type" in kw else "str"
            nargs = kw["nargs"].value if isinstance(kw.get("nargs"), ast.Constant) else None
            if action in ("store_true", "store_false") or (action.endswith("StoreTrueAction")):
                kind, typ, choices = "flag", "bool", None
            elif action.endswith("BooleanOptionalAction"):
                names += ["--no-" + n[2:] for n in names]
                kind, typ, choices = "flag", "bool", None
            else:
                kind = "list" if nargs in ("*", "+") else "value"
            dest = kw["dest"].value if isinstance(kw.get("dest"), ast.Constant) else names[0][2:].replace("-", "_")
            yield _option(names, dest, kind, typ if typ in ("int", "float", "bool") else "str", choices,
                          "%s:%d" % (rel, node.lineno), deprecated)


def _algorithms(pkg):
    algos = set()
    tree = _parse(os.path.join(pkg, "srt", "speculative", "spec_info.py"))
    for cls in [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "SpeculativeAlgorithm"]:
        for stmt in cls.body:
            if isinstance(stmt, ast.Assign):
                algos.update(t.id for t in stmt.targets if isinstance(t, ast.Name) and t.id.isupper())
    algos.discard("NONE")
    registry = os.path.join(pkg, "srt", "speculative", "spec_registry.py")
    if os.path.exists(registry):
        algos.update(x for x in _constants(_parse(registry), {}).get("_RESERVED_ALIASES", []) if isinstance(x, str))
    for path in glob.glob(os.path.join(pkg, "**", "*.py"), recursive=True):
        with open(path, "rb") as f:
            text = f.read()
        if not REGISTER.search(text.decode("utf-8", "replace")):
            continue
        for node in ast.walk(ast.parse(text, filename=path)):  # calls in code, not in docstrings
            if (isinstance(node, ast.Call) and _dotted(node.func).endswith(("SpeculativeAlgorithm.register", "register_algorithm"))
                    and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
                algos.add(node.args[0].value.upper())
    return sorted(algos)


def read_contract(site_packages):
    """{version, options: {option_string: option}, speculative_algorithms} of site_packages/sglang."""
    pkg = os.path.join(site_packages, "sglang")
    fields_dir = os.path.join(pkg, "srt", "arg_groups", "fields")
    server_args = os.path.join(pkg, "srt", "server_args.py")
    if not (os.path.isdir(fields_dir) and os.path.exists(server_args)):
        raise ContractError("%s does not look like SGLang >= 0.5.23 (no srt/arg_groups/fields or srt/server_args.py); "
                            "the flag contract reads that layout" % pkg)
    version = None
    for meta in glob.glob(os.path.join(site_packages, "sglang-*.dist-info", "METADATA")):
        with open(meta) as f:
            version = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("Version:")), None)
    env = _constants(_parse(os.path.join(pkg, "srt", "arg_groups", "choices.py")), {})
    for fn, (rel, const) in DYNAMIC_CHOICES.items():
        src = os.path.join(pkg, rel)
        if os.path.exists(src):
            env[fn] = _constants(_parse(src), {}).get(const)
    options = {}
    found = []
    for path in sorted(glob.glob(os.path.join(fields_dir, "*.py"))):
        found += list(_field_options(path, env, os.path.relpath(path, site_packages)))
    found += list(_handwritten_options(server_args, env, os.path.relpath(server_args, site_packages)))
    for opt in found:
        for n in opt["names"]:
            options[n] = opt
    return {"version": version, "options": options, "speculative_algorithms": _algorithms(pkg)}


def fingerprint(site_packages):
    """What the contract depends on, cheaply: every .py file of the package with its size and mtime, and
    the version record. A patch, an upgrade or a reinstall changes it; nothing is read but the directory."""
    h = hashlib.sha256()
    stack = [os.path.join(site_packages, "sglang")]
    while stack:
        d = stack.pop()
        for e in sorted(os.scandir(d), key=lambda e: e.name):
            if e.is_dir(follow_symlinks=False):
                stack.append(e.path)
            elif e.name.endswith(".py"):
                st = e.stat(follow_symlinks=False)
                h.update(("%s %d %d\n" % (e.path, st.st_size, st.st_mtime_ns)).encode("utf-8", "surrogateescape"))
    for meta in sorted(glob.glob(os.path.join(site_packages, "sglang-*.dist-info", "METADATA"))):
        st = os.stat(meta)
        h.update(("%s %d %d\n" % (meta, st.st_size, st.st_mtime_ns)).encode("utf-8", "surrogateescape"))
    return h.hexdigest()


def read_contract_cached(site_packages, cache_dir, write=True):
    """read_contract, kept in cache_dir under the package's fingerprint: reading the contract parses
    thousands of files (about half a second), the fingerprint only lists them. (contract, cache hit).
    write=False (check mode) reads a cached contract but never writes one."""
    fp = fingerprint(site_packages)
    path = os.path.join(cache_dir, hashlib.sha1(os.path.realpath(site_packages).encode()).hexdigest()[:16] + ".json")
    try:
        with open(path) as f:
            cached = json.load(f)
        if cached.get("fingerprint") == fp:
            return cached["contract"], True
    except (OSError, ValueError, AttributeError):
        pass
    contract = read_contract(site_packages)
    if not write:
        return contract, False
    try:
        os.makedirs(cache_dir, mode=0o755, exist_ok=True)
        atomic_write(path, json.dumps({"fingerprint": fp, "contract": contract}))
    except OSError:
        pass  # a cache that cannot be written costs time, not correctness
    return contract, False


def _number(typ, value):
    try:
        {"int": int, "float": float}[typ](value)
        return True
    except (KeyError, ValueError):
        return typ not in ("int", "float")


def check_argv(contract, argv):
    """Problems with argv (the arguments after `-m sglang.launch_server`), one string each."""
    opts, algos = contract["options"], contract["speculative_algorithms"]
    version = contract.get("version") or "?"
    problems, i = [], 0
    while i < len(argv):
        tok = argv[i]
        i += 1
        if not tok.startswith("--"):
            problems.append("%r is not a flag (a value without a flag before it)" % tok)
            continue
        name, eq, inline = tok.partition("=")
        opt = opts.get(name)
        if opt is None:
            prefixed = sorted(n for n in opts if n.startswith(name))
            near = difflib.get_close_matches(name, list(opts), n=3, cutoff=0.75)
            hint = (" (argparse would call it ambiguous: %s)" % ", ".join(prefixed[:4]) if len(prefixed) > 1 else
                    "; did you mean %s?" % " or ".join(near) if near else "")
            problems.append("%s is not a flag of sglang %s%s" % (name, version, hint))
            if not eq:
                while i < len(argv) and not argv[i].startswith("--"):
                    i += 1
            continue
        if opt["deprecated"]:
            problems.append("%s is deprecated in sglang %s; use its replacement (see its help)" % (name, version))
        if opt["kind"] == "flag":
            if eq:
                problems.append("%s takes no value (got %r)" % (name, inline))
            continue
        values = [inline] if eq else []
        if not eq:
            while i < len(argv) and (not argv[i].startswith("--") or re.match(r"^-\d", argv[i])):
                values.append(argv[i])
                i += 1
                if opt["kind"] in ("value", "optional"):
                    break
        if not values and opt["kind"] in ("value", "list") and opt["kind"] != "optional":
            problems.append("%s needs a value" % name)
            continue
        for v in values:
            if opt["dest"] == "speculative_algorithm":
                if v.upper() not in algos:
                    problems.append("speculative algorithm %s is not in sglang %s (it has %s)%s"
                                    % (v, version, ", ".join(algos),
                                       "; apply a DDTree patch series (sglang_patch_series_dir) or choose DFLASH"
                                       if v.upper() == "DDTREE" else ""))
            elif opt["choices"] is not None and v not in opt["choices"]:
                problems.append("%s %s is not one of sglang %s's choices: %s" % (name, v, version, ", ".join(opt["choices"])))
            elif not _number(opt["type"], v):
                problems.append("%s %s is not a valid %s" % (name, v, opt["type"]))
    return problems
