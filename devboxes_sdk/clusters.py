"""Several clusters, one object: every configured controller asked at once, each within
one short timeout, and their answers kept apart by cluster.

Usage::

    from devboxes_sdk import Clusters

    clusters = Clusters()                    # the [clusters.NAME] tables of the config file
    for answer in clusters.list().answers:   # every cluster's boxes, asked in parallel
        print(answer.cluster, [box.name for box in answer.value])
    placed = clusters.create("atlas", gpu="nvidia-l4", cluster="auto")
    print(placed.cluster, placed.reason)

A cluster that does not answer within ``timeout`` seconds (3 by default) is an entry of
``errors``, never an exception for the whole call. Two configured names that reach one
cluster (the same ``cluster.id`` in their capabilities) are answered once, under the
first name, and said in ``notes``. Nothing here ever moves a box between clusters.
"""

from __future__ import annotations

import builtins
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Generic, TypeVar

from devboxes_sdk import models
from devboxes_sdk._silence import Silences, silence_path
from devboxes_sdk.client import Client, Devbox
from devboxes_sdk.config import (
    AUTO_CLUSTER,
    CLUSTER_SEPARATOR,
    ClusterSettings,
    config_path,
    read_config,
    resolve_cluster,
    split_name,
)
from devboxes_sdk.errors import ConfigurationError, DevboxesError, NotFound
from devboxes_sdk.placement import Placement, choose, offer

T = TypeVar("T")
U = TypeVar("U")

# Long enough for a controller across a continent, short enough that a person waits
# for a frozen one no longer than for a slow command.
DEFAULT_CLUSTER_TIMEOUT = 3.0


@dataclass(frozen=True)
class Answer(Generic[T]):
    cluster: str
    value: T


@dataclass(frozen=True)
class ClusterError:
    """A cluster that gave no answer: it did not answer in time, or refused."""

    cluster: str
    message: str


@dataclass(frozen=True)
class Answers(Generic[T]):
    """Every cluster's answer, in configuration order, and why the others gave none.

    ``notes`` says which configured names were answered under another's (one cluster
    reached through two URLs)."""

    answers: list[Answer[T]] = field(default_factory=list)
    errors: list[ClusterError] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def values(self) -> list[T]:
        return [answer.value for answer in self.answers]


@dataclass(frozen=True)
class Located(Generic[T]):
    """Something of one cluster: a box, a volume, a GPU catalog."""

    cluster: str
    item: T


@dataclass(frozen=True)
class Profiles:
    """One cluster's GPU catalog, with its free counts and "when?" where it gives them."""

    catalog: models.GpuCapabilities
    availability: models.GpuAvailability | None
    when: models.GpuWhen | None


@dataclass(frozen=True)
class Created:
    """A box made by :meth:`Clusters.create`, the cluster it went to, and why there."""

    cluster: str
    box: Devbox
    reason: str


class AmbiguousName(DevboxesError):
    """A bare box name found on more than one cluster."""


class NoClusterAnswered(DevboxesError):
    """A call that needs some cluster's answer got none: each line says why."""


class Clusters:
    """Every cluster of the configuration file's ``[clusters.NAME]`` tables (or those
    given), each with its own :class:`Client`.

    ``timeout`` bounds how long a merged call waits for any one cluster, in seconds; the
    clients of :meth:`client` keep the usual 30 s per request for everything else.
    """

    def __init__(
        self,
        clusters: Sequence[ClusterSettings] | None = None,
        *,
        timeout: float = DEFAULT_CLUSTER_TIMEOUT,
        env: Mapping[str, str] | None = None,
    ) -> None:
        if not timeout > 0:
            raise ValueError("timeout must be a positive number of seconds")
        self._timeout = float(timeout)
        self._silences = Silences(silence_path(env) if clusters is None else None)
        self._problems: dict[str, str] = {}
        self._settings: dict[str, ClusterSettings] = {}
        self._default: str | None = None
        if clusters is None:
            self._order = self._configured(env)
        else:
            self._order = [cluster.name for cluster in clusters]
            self._settings = {cluster.name: cluster for cluster in clusters}
        if len(set(self._order)) != len(self._order):
            raise ConfigurationError("two clusters have the same name")
        self._clients: dict[tuple[str, bool], Client] = {}
        self._capabilities: dict[str, models.Capabilities] = {}
        self._lock = threading.Lock()

    def _configured(self, env: Mapping[str, str] | None) -> list[str]:
        """The configuration file's clusters, in its order."""
        file = read_config(config_path(env))
        if not file.clusters:
            raise ConfigurationError(
                f"configuration file {file.path} names no clusters: add a [clusters.NAME] "
                "table per cluster (url, and token, token_file or token_from)"
            )
        self._default = file.default_cluster
        for entry in file.clusters:
            # A cluster without a token is one line of every answer, not the end of all.
            try:
                self._settings[entry.name] = resolve_cluster(file, entry, env)
            except ConfigurationError as error:
                self._problems[entry.name] = str(error)
        return [entry.name for entry in file.clusters]

    @property
    def names(self) -> tuple[str, ...]:
        """The clusters' names, in configuration order."""
        return tuple(self._order)

    @property
    def default(self) -> str:
        """The cluster a create without a cluster goes to: the file's ``default_cluster``,
        else the first."""
        return self._default or self._order[0]

    @property
    def timeout(self) -> float:
        return self._timeout

    def client(self, cluster: str) -> Client:
        """The client of ``cluster``, made on first use."""
        return self._client(cluster, quick=False)

    def _client(self, cluster: str, *, quick: bool) -> Client:
        """A client of ``cluster``; a quick one's requests each last at most the merged
        calls' timeout and are never tried again, so a cluster that refuses says so
        within it and a thread left behind by a frozen one soon ends."""
        if cluster in self._problems:
            raise ConfigurationError(self._problems[cluster])
        settings = self._settings.get(cluster)
        if settings is None:
            raise ConfigurationError(
                f"no cluster {cluster!r} (configured: {', '.join(self._order) or 'none'})"
            )
        with self._lock:
            made = self._clients.get((cluster, quick))
            if made is None:
                made = (
                    Client(settings.url, settings.token, timeout=self._timeout, retry=False)
                    if quick
                    else Client(settings.url, settings.token)
                )
                self._clients[(cluster, quick)] = made
        return made

    def close(self) -> None:
        for made in self._clients.values():
            made.close()

    def __enter__(self) -> Clusters:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- asking every cluster --------------------------------------------------------

    def ask(self, call: Callable[[Client], T], clusters: Sequence[str] | None = None) -> Answers[T]:
        """``call`` with each cluster's client (of ``clusters``, else all), all at once; the
        answers of those that answered within the timeout, and one error for each of the
        others. A cluster reached under two names is answered once, under the first."""
        return self._ask(lambda client, capabilities: call(client), clusters)

    def _ask(
        self,
        call: Callable[[Client, models.Capabilities], T],
        clusters: Sequence[str] | None = None,
    ) -> Answers[T]:
        """:meth:`ask`, with each cluster's capabilities, read first to know its id."""
        wanted = list(clusters) if clusters is not None else list(self._order)
        unknown = [name for name in wanted if name not in self._order]
        if unknown:
            raise ConfigurationError(
                f"no cluster {unknown[0]!r} (configured: {', '.join(self._order) or 'none'})"
            )
        results: dict[str, Answer[T] | ClusterError] = {}
        for name in wanted:
            if name in self._problems:
                results[name] = ClusterError(name, self._problems[name])

        def run(name: str) -> None:
            try:
                client = self._client(name, quick=True)
                value = call(client, self._read_capabilities(name, client))
            except DevboxesError as error:
                results[name] = ClusterError(name, str(error))
            else:
                results[name] = Answer(name, value)

        now, started = time.time(), time.monotonic()
        budgets = {
            name: self._silences.budget(self._settings[name].url, self._timeout, now)
            for name in wanted
            if name not in results
        }
        threads = [
            threading.Thread(target=run, args=(name,), name=f"devbox-{name}", daemon=True)
            for name in budgets
        ]
        for thread in threads:
            thread.start()
        for thread, budget in zip(threads, budgets.values(), strict=True):
            thread.join(max(started + budget - time.monotonic(), 0))
        for name, budget in budgets.items():
            url = self._settings[name].url
            if name in results:
                self._silences.answered(url)
            elif budget == self._timeout:
                self._silences.silent(url, now)
        self._silences.save(time.time())
        answers: list[Answer[T]] = []
        errors: list[ClusterError] = []
        notes: list[str] = []
        seen: dict[str, str] = {}
        for name in wanted:
            result = results.get(name)
            if result is None:
                errors.append(ClusterError(name, self._unanswered(name, budgets[name], now)))
            elif isinstance(result, ClusterError):
                errors.append(result)
            else:
                cluster = self._capabilities[name].cluster
                identity = cluster.id if cluster is not None else None
                first = seen.get(identity) if identity is not None else None
                if first is not None:
                    notes.append(f"{name} is the same cluster as {first}: shown once, as {first}")
                    continue
                if identity is not None:
                    seen[identity] = name
                answers.append(result)
        return Answers(answers, errors, notes)

    def _unanswered(self, name: str, budget: float, now: float) -> str:
        message = f"did not answer in {budget:g} s"
        since = self._silences.since(self._settings[name].url, now)
        if budget < self._timeout and since is not None:
            at = datetime.fromtimestamp(since).strftime("%H:%M:%S")
            message += f" (nor in {self._timeout:g} s at {at})"
        return message

    def _read_capabilities(self, name: str, client: Client) -> models.Capabilities:
        """What ``name``'s controller offers and which cluster it serves, asked once."""
        found = self._capabilities.get(name)
        if found is None:
            found = self._capabilities[name] = client.capabilities()
        return found

    # -- merged views ------------------------------------------------------------------

    def list(
        self,
        *,
        state: models.DevboxState | str | None = None,
        profile: str | None = None,
        owner: str | None = None,
    ) -> Answers[builtins.list[Devbox]]:
        """Every cluster's boxes (filtered as :meth:`Client.list`), newest first each."""
        return self.ask(lambda c: c.list(state=state, profile=profile, owner=owner))

    def volumes(self) -> Answers[builtins.list[models.Volume]]:
        """Every cluster's retained home volumes."""
        return self.ask(lambda c: c.volumes())

    def profiles(self, preset: models.Preset | None = None) -> Answers[Profiles]:
        """Every cluster's GPU catalog with its free counts (for ``preset`` when given)
        and "when?"; never summed across clusters."""
        return self._ask(lambda c, capabilities: _profiles(c, capabilities.gpu, preset))

    # -- one box -----------------------------------------------------------------------

    def locate(self, text: str) -> Located[Devbox]:
        """The box ``NAME@CLUSTER`` names, or the one box called NAME on any cluster.

        A bare name on no cluster that answered raises :class:`NotFound` (and
        :class:`NoClusterAnswered` when none answered); on several, :class:`AmbiguousName`
        naming each ``NAME@CLUSTER``."""
        name, cluster = split_name(text)
        if cluster is not None:
            return Located(cluster, self.client(cluster).get(name))
        found = self.ask(lambda c: _get_or_none(c, name))
        hits = [Located(a.cluster, a.value) for a in found.answers if a.value is not None]
        if len(hits) == 1:
            return hits[0]
        if not found.answers:
            raise NoClusterAnswered(_nobody(found.errors))
        if hits:
            spelled = " or ".join(f"{name}{CLUSTER_SEPARATOR}{hit.cluster}" for hit in hits)
            raise AmbiguousName(f"{name} is a box on {len(hits)} clusters: say {spelled}")
        silent = "".join(f"; {error.cluster}: {error.message}" for error in found.errors)
        raise NotFound(404, f"no box {name} on any cluster that answered{silent}")

    def place(
        self,
        gpu: bool | str | None,
        preset: models.Preset = "small",
    ) -> Placement:
        """Where ``--cluster auto`` would create a box asking for ``gpu`` (True: each
        cluster's default profile; a name; None or False: a CPU box)."""
        if gpu is None or gpu is False:
            reached = self.ask(lambda c: None)
            if not reached.answers:
                raise NoClusterAnswered(_nobody(reached.errors))
            first = reached.answers[0].cluster
            reason = f"{first}: a CPU box goes to the first cluster that answers"
            return Placement(first, None, reason, _lines(reached.errors))
        asked = None if gpu is True else gpu
        answered = self._ask(lambda c, capabilities: _counted(c, capabilities.gpu, preset))
        offers = [offer(a.cluster, *a.value, asked) for a in answered.answers]
        if not offers:
            raise NoClusterAnswered(_nobody(answered.errors))
        return replace(choose(offers, asked), unasked=_lines(answered.errors))

    def create(
        self,
        name: str,
        *,
        cluster: str | None = None,
        preset: models.Preset = "small",
        ttl_hours: int = 24,
        repository: str | None = None,
        gpu: bool | str | None = None,
        image: str | None = None,
    ) -> Created:
        """Create box ``name`` on ``cluster``, or where :meth:`place` says with
        ``"auto"``; None is :attr:`default` (or ``NAME@CLUSTER``'s)."""
        name, named = split_name(name)
        if named is not None and cluster is not None and named != cluster:
            raise ConfigurationError(f"{name}@{named} and cluster {cluster!r} disagree")
        chosen = named or cluster
        if chosen == AUTO_CLUSTER:
            placement = self.place(gpu, preset)
            where, reason = placement.cluster, placement.reason
        else:
            where = chosen or self.default
            reason = f"{where}: " + ("as asked" if chosen else "the default cluster")
        box = self.client(where).create(
            name, preset=preset, ttl_hours=ttl_hours, repository=repository, gpu=gpu, image=image
        )
        return Created(where, box, reason)


def _lines(errors: Sequence[ClusterError]) -> tuple[str, ...]:
    return tuple(f"{error.cluster}: {error.message}" for error in errors)


def _nobody(errors: Sequence[ClusterError]) -> str:
    why = "; ".join(f"{error.cluster}: {error.message}" for error in errors)
    return f"no cluster answered ({why})" if why else "no clusters are configured"


def _get_or_none(client: Client, name: str) -> Devbox | None:
    try:
        return client.get(name)
    except NotFound:
        return None


def _availability(client: Client, preset: models.Preset | None) -> models.GpuAvailability | None:
    try:
        return client.gpu.availability(preset)
    except NotFound:
        return None


def _profiles(
    client: Client, catalog: models.GpuCapabilities, preset: models.Preset | None
) -> Profiles:
    if not catalog.enabled:
        return Profiles(catalog, None, None)
    try:
        when = client.gpu.when()
    except NotFound:
        when = None
    return Profiles(catalog, _availability(client, preset), when)


def _counted(
    client: Client, catalog: models.GpuCapabilities, preset: models.Preset
) -> tuple[models.GpuCapabilities, builtins.list[models.ProfileAvailability] | None]:
    counted = _availability(client, preset) if catalog.enabled else None
    return catalog, counted.profiles if counted is not None else None
