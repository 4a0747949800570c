"""What each node of a stack served across nodes says of itself (`nodes.json`): the typed
document `launch.cluster`'s actors write and `repro verify` reads back, apart from the code that
reaches the nodes."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from repro_serving.builder.canonical import canonical_json
from repro_serving.builder.documents import parse_document
from repro_serving.builder.documents.host import HostFacts


class NodeFacts(BaseModel):
    """One node as its actor observed it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    rank: int
    address: str
    """The address its Ray node was started with."""
    node_id: str
    hostname: str
    host: HostFacts
    forbidden: dict[str, str]
    """Each variable of the manifest's forbidden environment set in the node's environment."""
    probes: dict[str, str]
    """Dispatch name → the variant the serving interpreter reported on that node."""
    boot_id: str | None = None
    """The node's kernel boot id (`/proc/sys/kernel/random/boot_id`): two nodes of one id are
    one kernel, whose pids two live processes never share."""


class NodesDocument(BaseModel):
    """`nodes.json`: every declared node's facts, by rank, and the nodes nobody declared."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    nodes: tuple[NodeFacts, ...]
    undeclared: tuple[str, ...]
    """Addresses of live Ray nodes of the cluster that no `[[node]]` names."""

    def to_bytes(self) -> bytes:
        document = self.model_dump(mode="json")
        for node, facts in zip(document["nodes"], self.nodes, strict=True):
            node["host"] = facts.host.to_json()
        return canonical_json(document)

    @classmethod
    def from_bytes(cls, data: bytes, *, where: str) -> NodesDocument:
        return parse_document(cls, data, where=where, what="the nodes' facts")

    def node(self, rank: int) -> NodeFacts:
        return next(n for n in self.nodes if n.rank == rank)


def node_name(rank: int, address: str) -> str:
    """How a refusal names a node."""
    return f"node rank {rank} ({address})"
