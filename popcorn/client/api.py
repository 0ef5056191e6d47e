"""The KernelBot leaderboard API over HTTP (protocol: ../shared/docs/popcorn-api.md).

Configuration follows the official popcorn CLI: the server comes from
POPCORN_API_URL, the user's id (`cli_id`) from ~/.popcorn.yaml, and the id goes
out as the X-Popcorn-Cli-Id header on every call to that server (never to another
one a redirect names). Every failure becomes one PopkitError line, and no message
ever contains the id. Idempotent GETs retry with backoff, or after the wait the
server names; a submission POST is never retried. A reply is read as it arrives, within a size and (but for
the event stream of a profile run, long by design) a time limit: an endless reply ends in one line, not a hang.
"""
from __future__ import annotations

import base64
import datetime as dt
import email.utils
import html
import http.client
import itertools
import json
import math
import os
import re
from pathlib import Path
from time import monotonic, sleep
from typing import Any, Callable, Iterator
from urllib.parse import quote, urlencode, urljoin, urlsplit

import requests
import yaml
from urllib3.exceptions import HTTPError as TransportError  # urllib3's base error, as read1 raises it
from urllib3.exceptions import NewConnectionError, ReadTimeoutError

from popcorn.client import sse
from popcorn.errors import PopkitError

DEFAULT_API_URL = "https://site--bot--dxfjds728w5v.code.run"
ID_HEADER = "X-Popcorn-Cli-Id"
PENDING_KEY = "pending_cli_id"  # a new id kept beside the working one until it is confirmed
MODES = ("test", "benchmark", "leaderboard", "profile")
TERMINAL_JOB_STATES = ("succeeded", "failed", "timed_out", "hacked")
PROGRESS_JOB_STATES = ("initial", "pending", "running")    # popcorn-api.md: job.status before a terminal one
RETRY_STATUSES = (502, 503, 504)
MAX_RETRY_WAIT_S = 60  # a GET waits for the server at most this long (Retry-After, "try again in"), then gives up
PROFILE_TIMEOUT_S = 120  # the profile upload's reply, and then each read of its event stream
# A whole reply, from the request to its last byte; requests' timeouts bound each read alone, so a reply that
# trickles in (a byte every few seconds) would never end. The official CLI's default for a whole call.
REPLY_DEADLINE_S = 180
# The largest reply read: a submission holds up to 1 MB of code (more once JSON-escaped) and a result with its logs a
# few MB, and /leaderboards every board's task files; far above all of them, and a bound on an endless reply.
MAX_REPLY_BYTES = 64 * 2**20
# The longest line of an event stream: the profile result is one line of JSON with the profiler's trace archives
# in base64 (tens of MB); the stream itself may last an hour, so its lines are what is bounded.
MAX_EVENT_LINE_BYTES = 256 * 2**20
READ_BYTES = 64 * 2**10  # the most one read of a reply's body asks for
HIDDEN_ID = "<your cli_id>"  # in place of the id wherever a server's text repeats it
REGISTER_HINT = "run `popkit register discord` (or `github`) and finish the login in the browser"

# The official CLI's OAuth apps; both redirect to the hosted server, which marks the id valid.
OAUTH = {
    "discord": ("https://discord.com/oauth2/authorize",
                {"client_id": "1361364685491802243", "response_type": "code", "scope": "identify"}),
    "github": ("https://github.com/login/oauth/authorize", {"client_id": "Ov23lieFd2onYk4OnKIR"}),
}

# Labels of the HTTP errors a user can meet; 401 and 5xx are handled apart.
ERROR_LABELS = {
    400: "rejected by the server",
    403: "not allowed",
    404: "not found",
    413: "file too large for the server",
    422: "the server could not read the request",
    429: "rate limited",
}
WRAPPED = re.compile(r"failed to prepare submission request: (\d{3}): (.*)", re.DOTALL)
RETRY_IN = re.compile(r"try again in (\d+)\s*s", re.IGNORECASE)
ERRNO = re.compile(r"\[Errno -?\d+\] ([^'\")\]]+)")
HTML_TITLE = re.compile(r"<title[^>]*>(.*?)</title", re.IGNORECASE | re.DOTALL)
SURROGATE = re.compile("[\ud800-\udfff]")  # in a parsed JSON string, only a lone one: json joins a pair


class HTTPError(PopkitError):
    """An error reply; `status` is its HTTP status."""

    def __init__(self, message: str, status: int):
        super().__init__(message)
        self.status = status


class NetworkError(PopkitError):
    """No usable reply: the server was unreachable, too slow, or the connection broke.

    `sent` is False when no connection was ever made, so the server cannot have seen the request.
    """

    def __init__(self, message: str, sent: bool = True):
        super().__init__(message)
        self.sent = sent


class StillRunning(PopkitError):
    """The job had not ended when the wait's limit came."""


def is_transient(exc: PopkitError) -> bool:
    """Whether the same request later may succeed: no reply (a timeout, a broken connection), a server error
    (5xx), a rate limit (429), or a job still running; never a refusal such as 403 or 404."""
    if isinstance(exc, HTTPError):
        return exc.status >= 500 or exc.status == 429
    return isinstance(exc, (NetworkError, StillRunning))


def never_connected(exc: requests.RequestException) -> bool:
    """Whether the request failed before it could be sent (refused, unknown host, connect timeout, a TLS
    handshake that failed)."""
    return isinstance(exc, (requests.ConnectTimeout, requests.exceptions.SSLError)) or any(
        isinstance(cause, NewConnectionError) for cause in causes(exc))


def causes(exc: BaseException):
    """EXC and the errors it wraps, outermost first (requests and urllib3 keep them in args or `reason`)."""
    for _ in range(8):              # a few levels deep at most; the bound only guards against a cycle
        if exc is None:
            return
        yield exc
        inner = getattr(exc, "reason", None)
        exc = inner if isinstance(inner, BaseException) else next(
            (arg for arg in exc.args if isinstance(arg, BaseException)), None)


# -- configuration ---------------------------------------------------------------------------

def api_url() -> str:
    """The server: POPCORN_API_URL, refused in one line unless it is an http(s) URL with a host."""
    url = os.environ.get("POPCORN_API_URL", DEFAULT_API_URL).rstrip("/")
    if not url.strip():      # as the official CLI, the default only when unset: POPCORN_API_URL=$UNSET went there
        raise PopkitError(f"POPCORN_API_URL is set but empty: unset it to use the hosted server ({DEFAULT_API_URL}), "
                          "or set it to your server's URL (http://127.0.0.1:8000)")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname or any(char.isspace() for char in url):
        raise PopkitError(f"POPCORN_API_URL is not an http(s) URL: {url!r} (it should look like "
                          "https://host or http://127.0.0.1:8000)")
    return url


def config_path() -> Path:
    return Path.home() / ".popcorn.yaml"


def read_config(path: Path) -> dict:
    """The YAML config as a dict; {} when the file is missing."""
    try:
        text = path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise PopkitError(f"cannot read {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise PopkitError(f"{path} is not UTF-8 text: fix it or {REGISTER_HINT}") from None
    try:
        config = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        # The parser's own message quotes the line, which would show the id.
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark else ""
        raise PopkitError(f"{path} is not valid YAML{where}: fix it or {REGISTER_HINT}") from None
    if config is None:
        return {}
    if not isinstance(config, dict):
        raise PopkitError(f"{path} is not a YAML mapping (it should hold `cli_id: ...`): fix it or {REGISTER_HINT}")
    return config


CLI_ID_CHARS = re.compile(r"[\x21-\x7e]+")  # an HTTP header value: printable ASCII, no spaces
MAX_ID_CHARS = 256  # a new id from the server: its uuid4 has 36


def load_cli_id(path: Path | None = None) -> str:
    path = path or config_path()
    cli_id = read_config(path).get("cli_id")
    if cli_id is None or cli_id == "":
        raise PopkitError(f"no cli_id in {path}: {REGISTER_HINT}")
    if not is_valid_id(cli_id):
        # Never quoted: the message must not show the id.
        raise PopkitError(f"the cli_id in {path} is malformed (it must be one word of printable ASCII, "
                          f"as `popkit register` writes it): fix it or {REGISTER_HINT}")
    return str(cli_id)


def is_valid_id(value) -> bool:
    """Whether a config's id can go out as the header: one word of printable ASCII (a YAML integer counts)."""
    return (not isinstance(value, bool) and isinstance(value, (str, int))
            and CLI_ID_CHARS.fullmatch(str(value)) is not None)


def save_cli_id(cli_id: str, path: Path | None = None) -> tuple[Path, Path | None]:
    """Store the id as the one in use (a pending one is dropped); as update_config."""
    return update_config({"cli_id": cli_id, PENDING_KEY: None}, path)


def update_config(values: dict, path: Path | None = None) -> tuple[Path, Path | None]:
    """Set keys (None removes one), others kept; readable by the owner only, replaced atomically. A file that
    cannot be read as a config is copied aside first; returns (the config, that copy or None)."""
    path = path or config_path()
    backup = None
    try:
        config = read_config(path)
    except PopkitError:
        config, backup = {}, keep_copy(path)
    config.update(values)
    config = {key: value for key, value in config.items() if value is not None}
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            yaml.safe_dump(config, handle)
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise PopkitError(f"cannot write {path}: {exc.strerror or exc}") from None
    return path, backup


def keep_copy(path: Path) -> Path | None:
    """A private copy of PATH beside it, as PATH.bak or else the first free PATH.bak.N (an older copy is
    never overwritten); a file that cannot be copied stops the write. None for a folder or the like, which
    the write refuses on its own."""
    if not path.is_file():
        return None
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise PopkitError(f"cannot read {path} to keep a copy before replacing it: {exc.strerror}") from None
    for n in itertools.count():
        backup = path.with_name(path.name + (".bak" if n == 0 else f".bak.{n}"))
        try:
            fd = os.open(backup, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            continue
        except OSError as exc:
            raise PopkitError(f"cannot keep a copy of {path} as {backup}: {exc.strerror}; it is unchanged") from None
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        return backup


def authorize_url(provider: str, cli_id: str, reset: bool = False) -> str:
    """The provider's login page; its state carries the id for the server's callback."""
    state = json.dumps({"cli_id": cli_id, "is_reset": reset}, separators=(",", ":"))
    base, params = OAUTH[provider]
    params = {**params, "redirect_uri": f"{DEFAULT_API_URL}/auth/cli/{provider}",
              "state": base64.urlsafe_b64encode(state.encode()).decode().rstrip("=")}
    return f"{base}?{urlencode(params)}"


# -- error replies ---------------------------------------------------------------------------

def error_detail(response: requests.Response, cli_id: str | None = None) -> str:
    """The server's explanation: `detail` (a string or a validation list), `message`, or the text; on one line,
    with CLI_ID hidden (an error page may echo the request's headers)."""
    try:
        body = loads(response.content)
    except ValueError:
        body = None
    detail = body.get("detail", body.get("message")) if isinstance(body, dict) else None
    if isinstance(detail, list) and all(isinstance(item, dict) for item in detail):
        detail = "; ".join(f"{'.'.join(map(str, item.get('loc', [])))}: {item.get('msg')}" for item in detail)
    elif isinstance(detail, (dict, list)):
        detail = json.dumps(detail)
    if detail is None:
        text = page_title(response.text) if "html" in response.headers.get("Content-Type", "") else response.text
    else:
        text = str(detail)
    return one_line(hide_id(text, cli_id)) or response.reason or "no details"


def page_title(page: str) -> str:
    """An HTML error page (a proxy's, say) as its title, where it has one: its first few hundred characters are
    markup and style."""
    found = HTML_TITLE.search(page)
    return html.unescape(found[1]) if found and found[1].strip() else page


def one_line(text: str, limit: int = 300) -> str:
    """TEXT with its whitespace (newlines too) collapsed, cut to LIMIT characters: an error stays one line."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def format_wait(seconds: int) -> str:
    minutes, seconds = divmod(seconds, 60)
    hours, minutes = divmod(minutes, 60)
    parts = [f"{hours} h" if hours else "", f"{minutes} min" if minutes else "",
             f"{seconds} s" if seconds or not (hours or minutes) else ""]
    return " ".join(p for p in parts if p)


def error_message(response: requests.Response, cli_id: str | None) -> str:
    """One line for an HTTP error reply to a request that carried CLI_ID (or none), naming the status and what to
    do where it is clear; the id itself never shows."""
    status, detail = response.status_code, error_detail(response, cli_id)
    if not cli_id and (status == 401 or (status == 400 and ID_HEADER.lower() in detail.lower())):
        return f"this needs a cli_id and none is configured ({status}: {detail}): {REGISTER_HINT}"
    if status == 401:
        return f"the server does not accept your cli_id (401: {detail}): {REGISTER_HINT}"
    label = ERROR_LABELS.get(status) or ("server error" if status >= 500 else "unexpected reply")
    wrapped = WRAPPED.match(detail) if status == 400 else None
    if wrapped:
        return f"{label} (400, inner {wrapped[1]}): {wrapped[2]}"
    message = f"{label} ({status}): {detail}"
    wait_s = retry_after_s(response, detail)
    if wait_s is not None:
        return f"{message} (wait {format_wait(wait_s)})"
    if status == 429:      # KernelBot's limits count submissions over a rolling hour
        return f"{message} (the server did not say how long to wait: its limits count the past hour, so wait up to 1 h)"
    return message


def retry_wait_s(response: requests.Response) -> float | None:
    """How long a GET waits before asking again after this error reply: the wait the server names (0 when it
    names none); None when it does not ask again: not a gateway error (502-504) or a 429, a 429 that names no
    wait, or a wait over MAX_RETRY_WAIT_S (the error line names it)."""
    status = response.status_code
    if status != 429 and status not in RETRY_STATUSES:
        return None
    wait_s = retry_after_s(response, error_detail(response))
    if wait_s is None:
        return None if status == 429 else 0.0
    return wait_s if wait_s <= MAX_RETRY_WAIT_S else None


def retry_after_s(response: requests.Response, detail: str) -> int | None:
    """The wait a 429 asks for: 'Try again in 3541s' in the detail, else a Retry-After header (seconds or
    an HTTP date)."""
    found = RETRY_IN.search(detail)
    if found:
        return int(found[1])
    header = response.headers.get("Retry-After", "").strip()
    if header.isascii() and header.isdigit():     # int() refuses some of isdigit's digits, as '²'
        return int(header)
    try:
        when = email.utils.parsedate_to_datetime(header)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.timezone.utc)
    return max(0, math.ceil((when - dt.datetime.now(dt.timezone.utc)).total_seconds()))


def redirect_message(method: str, path: str, response: requests.Response, base_url: str) -> str:
    """A POST or DELETE (an upload, a join, a deletion) answered with a redirect, which is not followed: requests
    turns a POST into a GET on a 301, 302 or 303 (the file or JSON body is lost and the new address answers
    something puzzling), and sends the request again on a 307 or 308. One line naming where the server
    pointed (and, where that is another origin than BASE_URL, as from http:// to https://, the POPCORN_API_URL
    that reaches it)."""
    target = urljoin(response.url, response.headers["Location"])
    parts, base = urlsplit(target), urlsplit(base_url)
    line = (f"{method} {path} was answered with a redirect ({response.status_code}) to {one_line(target, 120)}: not "
            f"followed, as a {method} is sent once")
    if (parts.scheme, parts.netloc) != (base.scheme, base.netloc):
        line += f"; if the server lives there, set POPCORN_API_URL to {parts.scheme}://{parts.netloc}"
    return line


def network_reason(exc: requests.RequestException) -> str:
    """'Connection refused' rather than urllib3's nested repr."""
    found = ERRNO.search(str(exc))
    return found[1].strip() if found else type(exc).__name__


def timed_out(exc: requests.RequestException) -> bool:
    """A timeout, before the reply began or in the middle of its body (which requests raises as a
    ConnectionError)."""
    return isinstance(exc, requests.Timeout) or any(isinstance(cause, ReadTimeoutError) for cause in causes(exc))


def break_reason(exc: requests.RequestException) -> str:
    """How a connection that was made broke: reset, closed before a reply, or a reply cut short."""
    for cause in causes(exc):
        if isinstance(cause, http.client.RemoteDisconnected):   # a ConnectionResetError too: asked first
            return "the server closed the connection without a reply"
        if isinstance(cause, ConnectionResetError):
            return "the connection was reset"
        if isinstance(cause, http.client.IncompleteRead):
            return "the reply was cut off before its end"
    return network_reason(exc)


def hide_id(text: str, cli_id: str | None) -> str:
    """TEXT with CLI_ID shown as HIDDEN_ID: a server's words are quoted in messages, and may repeat the request's
    headers."""
    return text.replace(cli_id, HIDDEN_ID) if cli_id else text


def reply_text(response: requests.Response) -> str:
    """The reply's text, with the id its request carried hidden."""
    request = getattr(response, "request", None)
    return hide_id(response.text, request.headers.get(ID_HEADER) if request is not None else None)


def format_bytes(count: int) -> str:
    return f"{count / 2**20:g} MiB" if count >= 2**20 else f"{count:,} bytes"


def arriving(response: requests.Response) -> Iterator[bytes]:
    """A reply's body (decoded, as iter_content's) in pieces as they arrive. iter_content waits until a whole piece
    of a reply with a Content-Length has come, so a reply trickling in would never get back to a check between its
    pieces; read1 returns what one read of the connection gives."""
    try:
        while chunk := response.raw.read1(READ_BYTES, decode_content=True):
            yield chunk
    except TransportError as exc:       # as iter_content raises them
        raise requests.ConnectionError(exc) from None


def load_body(response: requests.Response, what: str, deadline: float) -> None:
    """Read the body of a reply requested with stream=True (WHAT, as 'GET /path') into RESPONSE (.content, .text),
    by the monotonic time DEADLINE and up to MAX_REPLY_BYTES; past either, one line and the connection closed."""
    body = bytearray()
    try:
        for chunk in arriving(response):
            body += chunk
            if len(body) > MAX_REPLY_BYTES:
                raise PopkitError(f"the reply to {what} is larger than {format_bytes(MAX_REPLY_BYTES)}: "
                                  "stopped reading it")
            if monotonic() > deadline:
                raise NetworkError(f"the reply to {what} was still coming after {REPLY_DEADLINE_S:g} s: stopped "
                                   "reading it")
    except BaseException:
        response.close()
        raise
    response._content, response._content_consumed = bytes(body), True    # where requests keeps a body it read


def loads(text: str | bytes) -> Any:
    """json.loads, where JSON nested deeper than the parser goes is a ValueError like any other text that is not
    JSON (json raises RecursionError, which no caller expects), and each lone surrogate JSON lets through ('\\ud800')
    is U+FFFD: no text holding one can be printed or written as UTF-8."""
    try:
        return without_surrogates(json.loads(text))
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None


def without_surrogates(value: Any) -> Any:
    if isinstance(value, str):
        return SURROGATE.sub("\ufffd", value)
    if isinstance(value, list):
        return [without_surrogates(item) for item in value]
    if isinstance(value, dict):
        return {without_surrogates(key): without_surrogates(item) for key, item in value.items()}
    return value


def decode_json(response: requests.Response, what: str, expect: type = object) -> Any:
    try:
        value = loads(response.content)
    except ValueError:
        snippet = " ".join(reply_text(response).split())[:80]
        raise PopkitError(f"the reply to {what} is not JSON: {snippet!r}") from None
    if not isinstance(value, expect):
        raise PopkitError(f"the reply to {what} is {json_kind(value)}, not {JSON_KINDS.get(expect, expect.__name__)}")
    return value


# -- reply shapes: what the rest of popkit relies on, checked once here ----------------------

JSON_KINDS = {dict: "an object", list: "a list", str: "a string", int: "an integer"}


def json_kind(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    return next((name for kind, name in JSON_KINDS.items() if isinstance(value, kind)), type(value).__name__)


def unexpected(what: str, where: str, value, kind: type) -> PopkitError:
    return PopkitError(f"the reply to {what} is not as expected: {where} is {json_kind(value)}, "
                       f"not {JSON_KINDS[kind]}")


def check_items(value: list, what: str, kind: type, where: str = "item") -> list:
    """VALUE (a list) when every item is of KIND; else a PopkitError naming the first odd one."""
    for index, item in enumerate(value):
        if not isinstance(item, kind) or isinstance(item, bool):
            raise unexpected(what, f"{where} {index}", item, kind)
    return value


def check_fields(value: dict, what: str, where: str = "", **kinds: type) -> dict:
    """VALUE when each named field is null, missing, or of its kind."""
    for key, kind in kinds.items():
        field = value.get(key)
        if field is not None and (not isinstance(field, kind) or isinstance(field, bool)):
            raise unexpected(what, f"{where}{key}", field, kind)
    return value


def check_submission(value: dict, what: str) -> dict:
    """A submission reply (GET /user/submissions/{id}): the fields popkit reads have their documented kinds."""
    check_fields(value, what, runs=list, job=dict, runner_queue=dict, code=str)
    for index, run in enumerate(check_items(value.get("runs") or [], what, dict, "run")):
        check_fields(run, what, f"run {index} ", result=dict)
    return value


# -- submissions' progress -------------------------------------------------------------------

def job_status(submission: dict) -> str | None:
    return (submission.get("job") or {}).get("status")


def is_finished(submission: dict) -> bool:
    """A terminal job status; `done` alone is set before the final status is written."""
    status = job_status(submission)
    return status in TERMINAL_JOB_STATES if status else bool(submission.get("done"))


# -- the client ------------------------------------------------------------------------------

class Session(requests.Session):
    """requests drops only an Authorization header on a redirect to another server, so the id would go along:
    such a redirect is refused instead, in one line."""

    def rebuild_auth(self, prepared_request, response):
        if ID_HEADER in prepared_request.headers and self.should_strip_auth(response.request.url, prepared_request.url):
            target = urlsplit(prepared_request.url)
            raise PopkitError(f"{response.request.method} {urlsplit(response.request.url).path} was redirected to "
                              f"another server ({target.scheme}://{target.netloc}): not followed, so that your cli_id "
                              "is not sent there; if you trust that server, set POPCORN_API_URL to it")
        super().rebuild_auth(prepared_request, response)


class Client:
    """Calls on one server as one user; per-call timeouts follow the official CLI."""

    def __init__(self, base_url: str | None = None, cli_id: str | None = None, *, retries: int = 3,
                 backoff_s: float = 1.0, timeout_s: float | None = None, on_retry: Callable[[str], None] | None = None):
        self.base_url = (base_url or api_url()).rstrip("/")
        self.session = Session()
        if cli_id:
            self.session.headers[ID_HEADER] = cli_id
        self.retries = retries
        self.backoff_s = backoff_s
        self.timeout_s = timeout_s  # overrides every per-call timeout when set
        self.on_retry = on_retry    # told each failure that a GET retries after, and the pause

    @classmethod
    def from_config(cls, require_id: bool = True, **kwargs) -> "Client":
        """A client for POPCORN_API_URL; the id is optional for the public listings."""
        if require_id:
            cli_id = load_cli_id()
        else:
            try:
                cli_id = load_cli_id()
            except PopkitError:
                cli_id = None
        return cls(cli_id=cli_id, **kwargs)

    @property
    def has_id(self) -> bool:
        return ID_HEADER in self.session.headers

    def _send(self, method: str, path: str, *, timeout: float, retry: bool = False,
              **kwargs) -> requests.Response:
        """One request (GETs: several, after the backoff or the wait the server names); an error reply raises
        PopkitError."""
        timeout = self.timeout_s or timeout
        events = kwargs.pop("stream", False)     # the caller reads a successful reply as an event stream
        kwargs.setdefault("allow_redirects", method == "GET")    # a POST or DELETE is sent once: see redirect_message
        attempts = 1 + (self.retries if retry else 0)
        server_wait_s = 0.0
        for attempt in range(attempts):
            if attempt:
                pause_s = max(self.backoff_s * 2 ** (attempt - 1), server_wait_s)
                if self.on_retry:
                    self.on_retry(f"{failure}; asking again in {pause_s:g} s ({attempt} of {self.retries})")
                sleep(pause_s)
            deadline = monotonic() + REPLY_DEADLINE_S
            try:
                response = self.session.request(method, self.base_url + path, timeout=timeout, stream=True, **kwargs)
                if not (events and response.ok):
                    load_body(response, f"{method} {path}", deadline)
            except requests.RequestException as exc:
                failure, server_wait_s = self._network_error(exc, f"{method} {path}", timeout), 0.0
                continue
            if response.is_redirect:      # only a request that does not follow one: a POST or DELETE
                raise HTTPError(redirect_message(method, path, response, self.base_url), response.status_code)
            if response.ok:
                return response
            failure = HTTPError(error_message(response, self.session.headers.get(ID_HEADER)), response.status_code)
            server_wait_s = retry_wait_s(response)
            if server_wait_s is None:
                break
        raise failure

    def _network_error(self, exc: requests.RequestException, request: str, timeout: float) -> NetworkError:
        """No connection, no reply in time, or a connection that broke: which one, in words."""
        sent = not never_connected(exc)
        if timed_out(exc):
            return NetworkError(f"no reply from {self.base_url} within {timeout:g} s ({request})", sent=sent)
        if not sent:
            return NetworkError(f"cannot reach {self.base_url} ({request}): {network_reason(exc)}", sent=False)
        return NetworkError(f"the connection to {self.base_url} broke off ({request}): {break_reason(exc)}")

    def _get(self, path: str, timeout: float, expect: type = object, **params) -> Any:
        response = self._send("GET", path, timeout=timeout, retry=True, params=params or None)
        return decode_json(response, f"GET {path}", expect)

    # listings (a board goes out in lowercase, as in an upload's path: the server's names are)

    def leaderboards(self) -> list[dict]:
        return check_items(self._get("/leaderboards", 30, list), "GET /leaderboards", dict)

    def gpus(self, leaderboard: str) -> list[str]:
        """The GPUs the board runs on; an empty list is an error (the server names none)."""
        path = f"/gpus/{quote(leaderboard.lower(), safe='')}"
        names = check_items(self._get(path, 120, list), f"GET {path}", str)
        if not names:
            raise PopkitError(f"the server lists no GPU for leaderboard {leaderboard} (GET {path} answered [])")
        return names

    def ranking(self, leaderboard: str, gpu: str) -> list[dict]:
        """Each user's best public score on that GPU (scores in seconds), best first. An empty ranking
        is checked against the board's GPUs: the server answers [] for a GPU name it does not know."""
        path = f"/submissions/{quote(leaderboard.lower(), safe='')}/{quote(gpu, safe='')}"
        entries = check_items(self._get(path, 30, list), f"GET {path}", dict)
        if not entries:
            self.require_gpu(leaderboard, gpu)
        return entries

    def require_gpu(self, leaderboard: str, gpu: str) -> None:
        """A PopkitError unless the board runs on GPU (names are case-sensitive: 'B200', not 'b200')."""
        names = self.gpus(leaderboard)
        if gpu in names:
            return
        close = [name for name in names if name.lower() == gpu.lower()]
        hint = f": did you mean {close[0]}?" if close else ""
        raise PopkitError(f"leaderboard {leaderboard} does not run on GPU {gpu!r} (it runs on "
                          f"{', '.join(names)}){hint}")

    # the user's submissions

    def user_submissions(self, leaderboard: str | None = None, limit: int = 50, offset: int = 0) -> list[dict]:
        params = {"limit": limit, "offset": offset}
        if leaderboard:
            params["leaderboard"] = leaderboard.lower()
        found = check_items(self._get("/user/submissions", 30, list, **params), "GET /user/submissions", dict)
        for entry in found:
            check_fields(entry, "GET /user/submissions", runs=list)
            check_items(entry.get("runs") or [], "GET /user/submissions", dict, "run")
        return found

    def submission(self, submission_id: int) -> dict:
        path = f"/user/submissions/{int(submission_id)}"
        return check_submission(self._get(path, 30, dict), f"GET {path}")

    def delete_submission(self, submission_id: int) -> dict:
        path = f"/user/submissions/{int(submission_id)}"
        reply = decode_json(self._send("DELETE", path, timeout=30), f"DELETE {path}", dict)
        if reply.get("status") != "ok":    # the server confirms with {"status": "ok", "submission_id": id}
            answered = one_line(hide_id(json.dumps(reply), self.session.headers.get(ID_HEADER)), 120)
            raise PopkitError(f"the server did not confirm that submission {int(submission_id)} was deleted "
                              f"(DELETE {path} answered {answered}): check with "
                              f"`popkit submissions show {int(submission_id)}`")
        return reply

    def wait(self, submission_id: int, *, interval_s: float = 5.0, limit_s: float = 3600.0,
             on_poll: Callable[[float, dict], None] | None = None) -> tuple[dict, bytes]:
        """Poll until the job is terminal; the last reply, parsed and as raw bytes."""
        path = f"/user/submissions/{int(submission_id)}"
        start = monotonic()
        while True:
            response = self._send("GET", path, timeout=30, retry=True)
            submission = check_submission(decode_json(response, f"GET {path}", dict), f"GET {path}")
            elapsed = monotonic() - start
            if on_poll:
                on_poll(elapsed, submission)
            if is_finished(submission):
                return submission, response.content
            status = job_status(submission)
            if status is not None and status not in PROGRESS_JOB_STATES:   # polling would go on for limit_s
                known = ", ".join(PROGRESS_JOB_STATES + TERMINAL_JOB_STATES)
                raise PopkitError(f"submission {submission_id}: job status {status!r} is none popkit knows ({known}): "
                                  f"stopped waiting; see `popkit submissions show {submission_id}`")
            if elapsed >= limit_s:
                raise StillRunning(f"submission {submission_id} is not finished after {limit_s / 60:g} min")
            sleep(interval_s)

    # uploads

    def submit(self, leaderboard: str, gpu: str, mode: str, file: tuple[str, bytes]) -> dict:
        """Upload FILE (its name and bytes) for a background run (never retried); the 202 reply with details.id."""
        url_path = f"/submission/{quote(leaderboard.lower(), safe='')}/{quote(gpu, safe='')}/{mode.lower()}"
        landed = f"the upload may have been accepted: see `popkit submissions list --leaderboard {leaderboard}`"
        try:
            response = self._send("POST", url_path, timeout=60, files={"file": file})
        except NetworkError as exc:
            if not exc.sent:
                raise NetworkError(f"{exc}; nothing was uploaded", sent=False) from None
            raise NetworkError(f"{exc}; the upload may still have been accepted: "
                               f"see `popkit submissions list --leaderboard {leaderboard}`") from None
        except HTTPError as exc:
            if exc.status == 303:        # See Other: the answer to a request the server has taken
                raise HTTPError(f"{exc}; {landed}", exc.status) from None
            raise
        try:
            accepted = check_fields(decode_json(response, f"POST {url_path}", dict), f"POST {url_path}",
                                    details=dict, runner_queue=dict)
        except PopkitError as exc:
            raise PopkitError(f"{exc}; {landed}") from None
        submission_id = (accepted.get("details") or {}).get("id")
        if not isinstance(submission_id, int) or isinstance(submission_id, bool):
            raise PopkitError(f"the reply to POST {url_path} has no submission id; {landed}")
        return accepted

    def submit_profile(self, leaderboard: str, gpu: str, file: tuple[str, bytes],
                       on_status: Callable[[dict], None] | None = None) -> str:
        """Profile FILE (its name and bytes) over the event stream; the raw JSON text of its `result` event."""
        url_path = f"/{quote(leaderboard.lower(), safe='')}/{quote(gpu, safe='')}/profile"
        try:
            response = self._send("POST", url_path, timeout=PROFILE_TIMEOUT_S, stream=True,
                                  files={"file": file})
        except NetworkError as exc:
            if not exc.sent:
                raise NetworkError(f"{exc}; nothing was uploaded", sent=False) from None
            raise NetworkError(f"{exc}; the profile run may still go on at the server, and cannot be followed "
                               "again (a profile run has no submission id)") from None
        with response:
            kind = response.headers.get("Content-Type", "")
            if not kind.startswith("text/event-stream"):
                load_body(response, f"POST {url_path}", monotonic() + REPLY_DEADLINE_S)
                raise PopkitError(f"the reply to POST {url_path} is not an event stream ({kind or 'no Content-Type'}): "
                                  f"{one_line(reply_text(response), 120)!r}")
            try:
                for event in sse.iter_events(arriving(response), MAX_EVENT_LINE_BYTES):
                    if event.name == "result":
                        if not event.complete and not is_json(event.data):
                            raise NetworkError(f"the event stream from {self.base_url} broke off in the middle of "
                                               "the result: nothing was saved (the run itself may have finished)")
                        return event.data
                    if event.name == "error":
                        raise PopkitError(f"profile run failed: {stream_error(event.data)}")
                    if event.name == "status" and on_status:
                        on_status(loads_or_text(event.data))
            except sse.LineTooLong:
                raise PopkitError(f"a line of the event stream from {self.base_url} is longer than "
                                  f"{format_bytes(MAX_EVENT_LINE_BYTES)}: stopped reading it") from None
            except requests.RequestException as exc:
                why = f"no data for {self.timeout_s or PROFILE_TIMEOUT_S:g} s" if timed_out(exc) else break_reason(exc)
                raise NetworkError(f"the event stream from {self.base_url} broke off: {why}") from None
        raise PopkitError("the event stream ended without a result")

    # access and registration

    def join(self, code: str) -> list[str]:
        """Redeem an invite code (closed leaderboards); the leaderboards it opened."""
        reply = decode_json(self._send("POST", "/user/join", timeout=30, json={"code": code}),
                            "POST /user/join", dict)
        check_fields(reply, "POST /user/join", leaderboards=list)
        return check_items(reply.get("leaderboards") or [], "POST /user/join", str, "leaderboard")

    def id_is_valid(self) -> bool:
        """Whether the server accepts this client's id (a 401 says it does not)."""
        try:
            self._get("/user/submissions", 30, list, limit=1, offset=0)
        except HTTPError as exc:
            if exc.status == 401:
                return False
            raise
        return True

    def auth_init(self, provider: str) -> str:
        """A fresh id from the server, valid once the user logs in at the provider."""
        state = self._get("/auth/init", 30, dict, provider=provider).get("state")
        if not state or not isinstance(state, str):
            raise PopkitError("the reply to GET /auth/init has no state")
        if len(state) > MAX_ID_CHARS or not CLI_ID_CHARS.fullmatch(state):
            # It was saved, and every later verb refused the config's id as malformed. Never quoted: it is the id.
            raise PopkitError(f"the reply to GET /auth/init has no usable state (an id is one word of up to "
                              f"{MAX_ID_CHARS} printable ASCII characters, as the server's uuid4): nothing was saved")
        return state


def is_json(text: str) -> bool:
    try:
        loads(text)
    except ValueError:
        return False
    return True


def loads_or_text(data: str) -> dict:
    """An event's JSON object, or {'status': text} when it is not one."""
    try:
        value = loads(data)
    except ValueError:
        return {"status": data}
    return value if isinstance(value, dict) else {"status": data}


def stream_error(data: str) -> str:
    """'(400) why' from an `error` event's data."""
    error = loads_or_text(data)
    detail = one_line(str(error.get("detail") or error.get("status")))
    found = RETRY_IN.search(detail)        # a rate limit comes as a 400 error event on this endpoint
    wait = f" (rate limited: wait {format_wait(int(found[1]))})" if found else ""
    return (f"({error['status_code']}) {detail}" if error.get("status_code") else detail) + wait
