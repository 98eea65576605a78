"""A student's name: it becomes the tenant (the `user` field) of every request they send."""
from __future__ import annotations

MAX_NAME_CHARS = 64        # the server's limit on `user`
RESERVED = "tenant-"       # the background load's tenants are tenant-a, tenant-b, ...


def check_name(name: str) -> str:
    """The name, trimmed; ValueError naming the value and what is allowed."""
    name = name.strip()
    if not 0 < len(name) <= MAX_NAME_CHARS:
        raise ValueError(f"name must be 1 to {MAX_NAME_CHARS} characters (got {len(name)})")
    if name.startswith(RESERVED):
        raise ValueError(f"names starting with {RESERVED!r} are the background load's; pick another (got {name!r})")
    return name
