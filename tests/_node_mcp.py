"""A Node MCP server installed as `npm install --prefix tools PACKAGE` leaves it, for tests.

`install(tools, cache)` puts `@modelcontextprotocol/server-filesystem` from the npm
registry into `tools/node_modules` (installed once into `cache`, then copied), or, where
npm or the registry cannot be reached, a tiny server of our own with the same layout:
`node_modules/.bin/mcp-server-filesystem` linking to a package's `dist/index.js`, an ES
module importing a dependency beside it in `node_modules`. Both serve `read_text_file` and
`list_directory` on their folder; the tiny one also `fail_loudly`, which writes to stderr
and answers `isError`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import uuid
from pathlib import Path

PACKAGE = "@modelcontextprotocol/server-filesystem"
BIN = "mcp-server-filesystem"
_UNREACHABLE_FOR = 3600.0  # seconds a failed install is not tried again
_INSTALL_TIMEOUT = 180.0

_SERVER = r"""#!/usr/bin/env node
import { readFileSync, readdirSync } from "node:fs";
import { createInterface } from "node:readline";
import { text } from "tiny-mcp-text";

const tools = [
  { name: "read_text_file", description: "Read a text file.",
    inputSchema: { type: "object", properties: { path: { type: "string" } }, required: ["path"] },
    annotations: { readOnlyHint: true } },
  { name: "list_directory", description: "List a folder.",
    inputSchema: { type: "object", properties: { path: { type: "string" } }, required: ["path"] },
    annotations: { readOnlyHint: true } },
  { name: "fail_loudly", description: "Say why on stderr, and fail.",
    inputSchema: { type: "object", properties: { why: { type: "string" } }, required: ["why"] },
    annotations: { readOnlyHint: true } },
];

function answer(request) {
  const params = request.params || {};
  if (request.method === "initialize") {
    return { protocolVersion: params.protocolVersion, capabilities: { tools: {} },
             serverInfo: { name: "tiny-files", version: "1.0.0" } };
  }
  if (request.method === "tools/list") return { tools };
  if (request.method === "ping") return {};
  if (request.method === "tools/call") {
    const args = params.arguments || {};
    if (params.name === "read_text_file") return text(readFileSync(args.path, "utf8"));
    if (params.name === "list_directory") return text(readdirSync(args.path).join("\n"));
    if (params.name === "fail_loudly") {
      process.stderr.write(`tiny-files: cannot go on: ${args.why}\n`);
      return { ...text("it failed"), isError: true };
    }
  }
  return null;
}

process.stderr.write("tiny-files: serving on stdio\n");
createInterface({ input: process.stdin }).on("line", (line) => {
  if (!line.trim()) return;
  const request = JSON.parse(line);
  if (request.id === undefined) return;
  const result = answer(request);
  const reply = result === null
    ? { jsonrpc: "2.0", id: request.id, error: { code: -32601, message: "unknown method" } }
    : { jsonrpc: "2.0", id: request.id, result };
  process.stdout.write(JSON.stringify(reply) + "\n");
});
"""

_TEXT = 'export function text(value) { return { content: [{ type: "text", text: value }] }; }\n'


def install(tools: Path, cache: Path) -> str:
    """Install the server into `tools` (`tools/node_modules/.bin/mcp-server-filesystem`);
    which one: "npm" or "tiny"."""
    installed = _from_npm(cache)
    if installed is None:
        tiny(tools)
        return "tiny"
    tools.mkdir(parents=True, exist_ok=True)
    shutil.copytree(installed / "node_modules", tools / "node_modules", symlinks=True)
    shutil.copy(installed / "package.json", tools / "package.json")
    return "npm"


def tiny(tools: Path) -> None:
    """Our own server, laid out as npm lays out an installed package and its dependency."""
    modules = tools / "node_modules"
    package = modules / "@planloom" / "tiny-files"
    (package / "dist").mkdir(parents=True)
    manifest = {"name": "@planloom/tiny-files", "type": "module", "bin": {BIN: "dist/index.js"}}
    (package / "package.json").write_text(json.dumps(manifest))
    entry = package / "dist" / "index.js"
    entry.write_text(_SERVER)
    entry.chmod(0o755)
    helper = modules / "tiny-mcp-text"
    helper.mkdir()
    (helper / "package.json").write_text(
        json.dumps({"name": "tiny-mcp-text", "type": "module", "main": "index.js"})
    )
    (helper / "index.js").write_text(_TEXT)
    (modules / ".bin").mkdir()
    (modules / ".bin" / BIN).symlink_to("../@planloom/tiny-files/dist/index.js")
    (tools / "package.json").write_text(json.dumps({"dependencies": {}}))


def _from_npm(cache: Path) -> Path | None:
    """The install of the package in `cache` (made once), or None without npm or registry."""
    done = cache / "install"
    if (done / "node_modules" / ".bin" / BIN).exists():
        return done
    npm = shutil.which("npm")
    failed = cache / "unreachable"
    if npm is None or (failed.exists() and time.time() - failed.stat().st_mtime < _UNREACHABLE_FOR):
        return None
    work = cache / f"work-{uuid.uuid4().hex[:8]}"
    work.mkdir(parents=True)
    argv = [npm, "install", "--prefix", str(work), "--no-audit", "--no-fund", "--ignore-scripts"]
    argv += ["--fetch-retries=0", "--fetch-timeout=30000", PACKAGE]
    try:
        subprocess.run(argv, capture_output=True, check=True, timeout=_INSTALL_TIMEOUT)
        os.rename(work, done)  # atomic: a concurrent install that lost finds it done
    except (OSError, subprocess.SubprocessError):
        shutil.rmtree(work, ignore_errors=True)
        if not (done / "node_modules" / ".bin" / BIN).exists():
            failed.touch()
            return None
    return done
