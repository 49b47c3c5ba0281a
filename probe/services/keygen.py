"""The key rings of the commands: `sla-probe keygen` makes and edits them, and
``run``, ``once`` and ``sink`` sign or verify with the one their settings name.

    run_keygen("k1", Path("ring.json"), force=False, edits={})        # a new ring file
    run_keygen("k2", None, force=False, edits={"--add": Path("ring.json")})

A rotation is three edits of the same file, each a step every probe can take
without losing a canary: ``--add`` (every verifier accepts the new key),
``--activate`` (canaries are signed with it), ``--drop`` (the old key is no longer
accepted). Files are written with mode 0600 and replaced atomically, so a running
``sla-probe run`` reloads either the old ring or the new one. Every problem is a
ConfigError naming the flag, the CLI's exit 2.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path

from probe.config import ProbeConfig
from probe.core.errors import ConfigError
from probe.core.keys import generate_key_ring, random_kid, random_secret
from probe.keyfile import KeyRingSource, create_key_file, read_key_file, replace_key_file

EXIT_OK = 0
NO_KEY_FILE = "required (create one with `sla-probe keygen`), or pass --allow-ephemeral-key"


def signing_key_ring(
    config: ProbeConfig, *, ephemeral_ok: bool, missing: str = NO_KEY_FILE
) -> KeyRingSource:
    """The key ring from ``signing_key_file``; without one, an ephemeral ring if
    ``ephemeral_ok``, else a ConfigError saying ``missing``."""
    if config.signing_key_file is None:
        if ephemeral_ok:
            return KeyRingSource.ephemeral()
        raise ConfigError("signing_key_file", missing)
    return KeyRingSource.from_file(config.signing_key_file)


def run_keygen(
    kid: str | None, output: Path | None, *, force: bool, edits: Mapping[str, Path | None]
) -> int:
    """The whole `keygen` command. ``edits``: the file each of ``--add``,
    ``--activate`` and ``--drop`` names, None when not given; at most one of them and
    ``output`` is given. With none of them, a new ring goes to stdout; otherwise one
    line on stderr says what was written. Returns the exit code, 0: every problem is
    a ConfigError."""
    given = [name for name, path in {"--output": output, **edits}.items() if path is not None]
    if len(given) > 1:
        raise ConfigError(given[1], f"cannot be combined with {given[0]}")
    if force and output is None:
        raise ConfigError("--force", "only applies to --output")
    if not given or output is not None:
        ring = generate_key_ring(kid)
        if output is None:
            sys.stdout.write(ring.to_json())
            return EXIT_OK
        write = replace_key_file if force else create_key_file
        write(output, ring, field="--output")
        print(f"wrote {output}: active {ring.active_kid}", file=sys.stderr)
        return EXIT_OK
    option = given[0]
    path = edits[option]
    assert path is not None
    if option == "--add":
        kid = kid or random_kid()
    elif kid is None:
        raise ConfigError(option, "needs --kid, the key to act on")
    # The file is replaced by a rename, which would turn a symlink into a file of its
    # own: the file the link points to is the one to edit.
    ring = read_key_file(path, follow_symlinks=False)
    if option == "--add":
        ring, done = ring.with_key(kid, random_secret()), f"added {kid} to"
    elif option == "--activate":
        ring, done = ring.with_active(kid), f"activated {kid} in"
    else:
        ring, done = ring.without(kid), f"dropped {kid} from"
    replace_key_file(path, ring, field=option)
    print(f"{done} {path}: active {ring.active_kid}, keys {', '.join(ring.kids)}", file=sys.stderr)
    return EXIT_OK
