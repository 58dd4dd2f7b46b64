"""A harness running the Workflow interpreter's Lua with lua5.1, as Karmada does with gopher-lua."""

from __future__ import annotations

import json
import subprocess
from typing import Any

import yaml

from tests.deploy.helpers import (
    INTERPRETER,
    need_tool,
)

# The Workflow interpreter's Lua, run with lua5.1

# A JSON encoder for the harness (gopher-lua hands Karmada Go values; here plain tables).
_LUA_JSON = r"""
local function encode(v)
  local t = type(v)
  if t == 'nil' then return 'null' end
  if t == 'boolean' then return tostring(v) end
  if t == 'number' then
    if v == math.floor(v) and math.abs(v) < 1e15 then return string.format('%d', v) end
    return string.format('%.17g', v)
  end
  if t == 'string' then
    return '"' .. v:gsub('[%c"\\]', function(c)
      return string.format('\\u%04x', string.byte(c))
    end) .. '"'
  end
  if #v > 0 or next(v) == nil and getmetatable(v) == 'array' then
    local parts = {}
    for i = 1, #v do parts[i] = encode(v[i]) end
    return '[' .. table.concat(parts, ',') .. ']'
  end
  local keys = {}
  for k in pairs(v) do table.insert(keys, tostring(k)) end
  table.sort(keys)
  local parts = {}
  for _, k in ipairs(keys) do table.insert(parts, encode(k) .. ':' .. encode(v[k])) end
  return '{' .. table.concat(parts, ',') .. '}'
end
"""


def lua_literal(value: Any) -> str:
    if value is None:
        return "nil"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        # Decimal escapes of the UTF-8 bytes, three digits each: a digit after one is safe.
        escaped = "".join(chr(b) if chr(b).isalnum() else f"\\{b:03d}" for b in value.encode())
        return "'" + escaped + "'"
    if isinstance(value, list):
        return "{" + ", ".join(lua_literal(v) for v in value) + "}"
    if isinstance(value, dict):
        return (
            "{"
            + ", ".join(f"[{lua_literal(k)}] = {lua_literal(v)}" for k, v in value.items())
            + "}"
        )
    raise TypeError(value)


def customization(name: str) -> str:
    ric = yaml.safe_load(INTERPRETER.read_text())
    return str(ric["spec"]["customizations"][name]["luaScript"])


def run_lua(name: str, call: str, *args: Any) -> Any:
    """Define the customization's function, call it with ``args``, return its results."""
    lua = need_tool("lua5.1", "apt-get install lua5.1")
    arg_list = ", ".join(lua_literal(a) for a in args)
    program = "\n".join(
        [
            _LUA_JSON,
            customization(name),
            f"local results = {{{call}({arg_list})}}",
            "local out = {}",
            "for i = 1, select('#', unpack(results)) do out[i] = encode(results[i]) end",
            "io.write('[' .. table.concat(out, ',') .. ']')",
        ]
    )
    out = subprocess.run([lua, "-"], input=program, capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def member_status(phase: str, **extra: Any) -> dict[str, Any]:
    status = {
        "phase": phase,
        "startedAt": "2026-12-02T10:00:00Z",
        "progress": "1/2",
        "estimatedDuration": 30,
        "resourcesDuration": {"cpu": 12, "memory": 40},
        "nodes": {"n1": {"id": "n1", "name": "n1", "type": "Pod", "phase": phase}},
    }
    status.update(extra)
    return status


def control_plane_workflow() -> dict[str, Any]:
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {"name": "eo-x7k2p-preprocess-1", "namespace": "portal"},
        "spec": {
            "entrypoint": "preprocess",
            "templates": [{"name": "preprocess", "container": {"image": "busybox"}}],
        },
    }
