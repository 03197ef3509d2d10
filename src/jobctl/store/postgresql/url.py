"""PostgreSQL URLs (README, Many hosts on PostgreSQL): the URL without its password, and
whether it travels in clear text (which locations are URLs: :func:`jobctl.paths.is_db_url`).

No driver is imported here: the CLI asks these questions before it knows it needs one.
"""

from __future__ import annotations

import ipaddress
from urllib.parse import parse_qsl, urlencode, urlsplit

#: query parameters that may carry a secret, removed with the password
_SECRET_PARAMS = frozenset({"password", "sslpassword"})


def redact(url: str) -> str:
    """The URL without its password (in the user-info part or as a query parameter).

    This is the form shown in log lines, ``status``, ``db info``, and given to commands as
    ``JOBCTL_DB``. The password then comes from ``~/.pgpass`` or ``PGPASSWORD``.
    """
    parts = urlsplit(url)
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, _, hostport = netloc.rpartition("@")
        user = userinfo.split(":", 1)[0]
        netloc = f"{user}@{hostport}" if user else hostport
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        kept = [(k, v) for k, v in pairs if k.lower() not in _SECRET_PARAMS]
        if len(kept) != len(pairs):
            query = urlencode(kept, safe="/")
    out = f"{parts.scheme}://{netloc}{parts.path}"
    if query:
        out += "?" + query
    if parts.fragment:
        out += "#" + parts.fragment
    return out


def _hosts(url: str) -> list[str]:
    parts = urlsplit(url)
    hostport = parts.netloc.rpartition("@")[2]
    hosts = []
    for item in hostport.split(","):
        if item.startswith("["):  # [::1]:5432
            hosts.append(item[1:].split("]", 1)[0])
        elif item:
            hosts.append(item.rsplit(":", 1)[0] if item.count(":") == 1 else item)
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        if key == "host" or key == "hostaddr":
            hosts.extend(h for h in value.split(",") if h)
    return hosts


def _is_local_host(host: str) -> bool:
    if not host or host.startswith("/") or host.startswith("@") or host == "localhost":
        return True  # a unix socket (or libpq's default, which is one)
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def insecure_reason(url: str) -> str | None:
    """Why this URL sends its traffic in clear over a network, or None when it does not.

    A host that is neither a unix socket nor a loopback address, with an ``sslmode`` that
    does not require TLS (libpq's default ``prefer`` falls back to clear text), is insecure:
    whoever sits on that network can read the jobs' commands and change them.
    """
    params = {k.lower(): v for k, v in parse_qsl(urlsplit(url).query, keep_blank_values=True)}
    if params.get("sslmode", "prefer").lower() in ("require", "verify-ca", "verify-full"):
        return None
    remote = [h for h in _hosts(url) if not _is_local_host(h)]
    if not remote:
        return None
    return (
        f"the connection to {remote[0]} may not be encrypted; add sslmode=require "
        "(or verify-full) to the URL"
    )
