"""Offline consistency checks that schemas alone cannot make, run by
deploy/validate.sh with its virtualenv's Python (PyYAML, jsonschema,
referencing come with check-jsonschema and kubernetes-validate).

  python deploy/validate.py asyncapi   # spec vs libs/contracts, the host-agent
                                       # protocol and the registry's topology
                                       # (deploy/topology.json)
  python deploy/validate.py k8s        # references between the manifests
  python deploy/validate.py compose    # references inside compose.yaml

Each prints one line per check group and exits 1 on the first group that
finds problems (after printing all of that group's problems).
"""

from __future__ import annotations

import json
import re
import sys
from datetime import datetime
from pathlib import Path
from urllib.parse import urlparse

import yaml

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "k8s"
def registry() -> list[str]:
    """The services of the binary's registry (src/services.rs), in start
    order: each line `&<crate>::SERVICE,` (a crate is named after its
    service)."""
    text = (ROOT / "src/services.rs").read_text(encoding="utf-8")
    names = re.findall(r"^\s*&(\w+)::SERVICE,", text, re.M)
    if not names:
        raise SystemExit("deploy/validate.py: no service found in src/services.rs")
    return names


SERVICES = registry()
# The processes that read GPUMARKET_RABBITMQ_MANAGEMENT_URL: the catalog
# (agents' broker users) and every consumer (queue depth metrics).
MANAGEMENT_API_USERS = {"catalog", "ordering", "metering", "billing", "webhooks", "provisioner"}


class Problems(list):
    def check(self, ok: bool, message: str) -> None:
        if not ok:
            self.append(message)

    def report(self, what: str) -> None:
        if self:
            print(f"FAIL {what}:")
            for p in self:
                print(f"  - {p}")
            sys.exit(1)
        print(f"ok   {what}")


def read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def config_env_names() -> set[str]:
    """Every GPUMARKET_* variable the binary reads: the platform's shared
    config, main.rs and dev.rs, and each service's and worker's own group
    of settings (its crate's settings.rs)."""
    names: set[str] = set()
    for src in [
        ROOT / "libs/platform/src/config.rs",
        ROOT / "src/main.rs",
        ROOT / "src/dev.rs",
        *sorted(ROOT.glob("services/*/src/settings.rs")),
        *sorted(ROOT.glob("workers/*/src/settings.rs")),
    ]:
        names |= set(re.findall(r'"(GPUMARKET_[A-Z0-9_]+)"', read(src)))
    # Each registered service's port and URL (Config::configure_service).
    for service in SERVICES:
        names |= {f"GPUMARKET_{service.upper()}_PORT", f"GPUMARKET_{service.upper()}_URL"}
    return names


# ---------------------------------------------------------------- asyncapi


# What the JSON of each Rust field type looks like, checked on the resolved
# property schema: (JSON type, format) with format None meaning "any".
RUST_TYPES = {
    "Uuid": ("string", "uuid"),
    "u16": ("integer", "uint16"),
    "i32": ("integer", "int32"),
    "i64": ("integer", "int64"),
    "u32": ("integer", "uint32"),
    "u64": ("integer", "uint64"),
    "bool": ("boolean", None),
    "String": ("string", None),
    "Decimal": ("string", None),
    "DateTime<Utc>": ("string", "date-time"),
    "chrono::NaiveDate": ("string", "date"),
    "NaiveDate": ("string", "date"),
}


def wire_enums() -> dict[str, list[str]]:
    """The wire enums of libs/contracts/src/states.rs (`wire_enum!`): each
    is a JSON string, one of its names. `JobKind` is a string of its own
    grammar (`provision:2`), checked as a plain string."""
    source = read(ROOT / "libs/contracts/src/states.rs")
    enums = {
        name: re.findall(r'= "([^"]+)",', body)
        for name, body in re.findall(r'\n\s*(\w+), "[^"]+" \{([^}]*)\}', source)
    }
    enums["JobKind"] = []
    return enums


WIRE_ENUMS = wire_enums()


class Field(tuple):
    """(json name, Rust type, has #[serde(default)], is #[serde(flatten)])."""

    name = property(lambda self: self[0])
    rust_type = property(lambda self: self[1])
    default = property(lambda self: self[2])
    flatten = property(lambda self: self[3])


def rust_structs(source: str) -> dict[str, list[Field]]:
    """`pub struct Name { pub field: Type, .. }` -> its fields, with the
    serde attributes that change the JSON: rename, default, flatten."""
    structs = {}
    for name, body in re.findall(r"pub struct (\w+) \{(.*?)\n\}", source, re.S):
        fields = []
        rename, default, flatten = None, False, False
        for line in body.splitlines():
            line = line.strip()
            m = re.match(r"#\[serde\((.*)\)\]$", line)
            if m:
                for attr in (a.strip() for a in m.group(1).split(",")):
                    r = re.fullmatch(r'rename = "([^"]+)"', attr)
                    if r:
                        rename = r.group(1)
                    elif attr == "default":
                        default = True
                    elif attr == "flatten":
                        flatten = True
                continue
            m = re.match(r"pub (\w+): (.+),$", line)
            if m:
                fields.append(Field((rename or m.group(1), m.group(2).strip(), default, flatten)))
                rename, default, flatten = None, False, False
        structs[name] = fields
    return structs


def json_fields(structs: dict[str, list[Field]], struct: str) -> list[Field]:
    """The struct's fields as they appear in its JSON (flattened ones inlined)."""
    out = []
    for f in structs[struct]:
        if f.flatten:
            out += json_fields(structs, f.rust_type)
        else:
            out.append(f)
    return out


def type_problem(doc: dict, structs: dict, prop: dict, rust_type: str, names: dict | None = None) -> str | None:
    """Why the property schema `prop` does not describe `rust_type`'s JSON
    (None when it does). `names` maps a struct to its schema's name where
    the two differ (see check_structs)."""
    names = names or {}
    rust_type = re.sub(r"^(crate::\w+::|contracts::\w+::|std::collections::)", "", rust_type)
    m = re.fullmatch(r"Option<(.+)>", rust_type)
    if m:
        inner = m.group(1)
        if prop.get("oneOf"):
            alts = prop["oneOf"]
            if len(alts) != 2 or alts[1] != {"type": "null"}:
                return "an Option must be oneOf [<type>, {type: null}]"
            return type_problem(doc, structs, alts[0], inner, names)
        t = prop.get("type")
        if isinstance(t, list) and len(t) == 2 and t[1] == "null":
            return type_problem(doc, structs, {**prop, "type": t[0]}, inner, names)
        return "an Option must be nullable (oneOf with null, or type [<type>, null])"
    m = re.fullmatch(r"Vec<(.+)>", rust_type)
    if m:
        resolved = resolve(doc, prop["$ref"]) if "$ref" in prop else prop
        if resolved.get("type") != "array" or "items" not in resolved:
            return "a Vec must be an array with items"
        return type_problem(doc, structs, resolved["items"], m.group(1), names)
    # A map with string keys is a JSON object whose values are all V.
    m = re.fullmatch(r"BTreeMap<String, (.+)>", rust_type)
    if m:
        resolved = resolve(doc, prop["$ref"]) if "$ref" in prop else prop
        values = resolved.get("additionalProperties")
        if resolved.get("type") != "object" or not isinstance(values, dict) or resolved.get("properties"):
            return "a BTreeMap<String, _> must be an object with additionalProperties (a schema) and no properties"
        return type_problem(doc, structs, values, m.group(1), names)
    if rust_type in structs:
        schema = names.get(rust_type, rust_type)
        if prop.get("$ref") != f"#/components/schemas/{schema}":
            return f"must $ref #/components/schemas/{schema}"
        return None
    if rust_type == "serde_json::Value":
        return None
    if rust_type in WIRE_ENUMS:
        resolved = resolve(doc, prop["$ref"]) if "$ref" in prop else prop
        if resolved.get("type") != "string":
            return f"a {rust_type} is a string, is {resolved}"
        names = WIRE_ENUMS[rust_type]
        # The schema may list fewer (the values a message of this kind can
        # carry), never one the enum does not name.
        if "enum" in resolved and names and not set(resolved["enum"]) <= set(names):
            return f"a {rust_type} is one of {names}, the schema lists {resolved['enum']}"
        return None
    if rust_type not in RUST_TYPES:
        return f"Rust type {rust_type} unknown to validate.py"
    json_type, fmt = RUST_TYPES[rust_type]
    resolved = resolve(doc, prop["$ref"]) if "$ref" in prop else prop
    if resolved.get("type") != json_type or (fmt is not None and resolved.get("format") != fmt):
        return f"should be type {json_type} format {fmt}, is {resolved}"
    if rust_type == "Decimal" and prop.get("$ref") != "#/components/schemas/Decimal":
        return "a Decimal must use the Decimal schema"
    return None


def check_structs(p: "Problems", doc: dict, structs: dict, names, skip=(), schema_names: dict | None = None) -> None:
    """components.schemas.<Name> has exactly the struct's JSON fields, in
    order; required are those without #[serde(default)] (those carry the
    default), and each property describes its Rust type. `schema_names`
    maps a struct to the schema that documents it when that is not its own
    name (two crates' structs of one name)."""
    schemas = doc["components"]["schemas"]
    schema_names = schema_names or {}
    for struct in names:
        schema_name = schema_names.get(struct, struct)
        schema = schemas.get(schema_name)
        if schema is None:
            p.append(f"struct {struct} has no components.schemas.{schema_name}")
            continue
        fields = json_fields(structs, struct)
        props = schema.get("properties", {})
        names_ = [f.name for f in fields]
        p.check(list(props) == names_, f"{struct}: properties {list(props)} != struct fields {names_}")
        required = sorted(f.name for f in fields if not f.default)
        p.check(sorted(schema.get("required", [])) == required, f"{struct}: required {sorted(schema.get('required', []))} != fields without #[serde(default)] {required}")
        if struct in skip:
            continue
        for f in fields:
            prop = props.get(f.name)
            if prop is None:
                continue
            if f.default:
                p.check("default" in prop, f"{struct}.{f.name}: #[serde(default)] but the schema has no default")
            problem = type_problem(doc, structs, prop, f.rust_type, schema_names)
            p.check(problem is None, f"{struct}.{f.name}: {f.rust_type}: {problem}")


def referenced_structs(structs: dict[str, list[Field]], root: str) -> list[str]:
    """`root` and every struct of `structs` its fields use, transitively
    (in the order first met)."""
    seen = [root]
    for struct in seen:
        for f in structs[struct]:
            for word in re.findall(r"\w+", f.rust_type):
                if word in structs and word not in seen:
                    seen.append(word)
    return seen


def resolve(doc: dict, ref: str):
    if not ref.startswith("#/"):
        raise KeyError(f"non-local $ref {ref}")
    node = doc
    for part in ref[2:].split("/"):
        part = part.replace("~1", "/").replace("~0", "~")
        node = node[part]
    return node


def walk_refs(node, path="$"):
    if isinstance(node, dict):
        for k, v in node.items():
            if k == "$ref" and isinstance(v, str):
                yield path, v
            else:
                yield from walk_refs(v, f"{path}.{k}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from walk_refs(v, f"{path}[{i}]")


def check_asyncapi() -> None:
    import jsonschema
    from referencing import Registry, Resource
    from referencing.jsonschema import DRAFT7

    spec_path = ROOT / "api-specs/asyncapi.yaml"
    doc = yaml.safe_load(read(spec_path))

    p = Problems()
    for path, ref in walk_refs(doc):
        try:
            resolve(doc, ref)
        except (KeyError, TypeError, IndexError):
            p.append(f"{path}: $ref {ref} does not resolve")
    for op_name, op in doc.get("operations", {}).items():
        channel = op["channel"]["$ref"]
        for m in op.get("messages", []):
            p.check(
                m["$ref"].startswith(channel + "/messages/"),
                f"operation {op_name}: message {m['$ref']} is not one of its channel's",
            )
    p.report("asyncapi: every $ref resolves; operations use their channel's messages")

    # Examples against their schemas (Draft 7, the base of AsyncAPI schemas).
    p = Problems()
    registry = Registry().with_resource("urn:asyncapi", Resource.from_contents(doc, DRAFT7))
    formats = jsonschema.FormatChecker()

    @formats.checks("date-time", raises=ValueError)
    def _date_time(value) -> bool:
        if not isinstance(value, str):
            return True
        if not re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)", value):
            raise ValueError("not RFC 3339")
        datetime.fromisoformat(value.replace("Z", "+00:00"))
        return True

    messages = doc["components"]["messages"]
    for name, message in messages.items():
        schema_ref = message["payload"]["$ref"]
        validator = jsonschema.Draft7Validator(
            {"$ref": "urn:asyncapi" + schema_ref}, registry=registry, format_checker=formats
        )
        examples = message.get("examples", [])
        p.check(bool(examples), f"message {name} has no example")
        for ex in examples:
            for err in validator.iter_errors(ex["payload"]):
                p.append(f"message {name} example {ex.get('name')}: {err.json_path}: {err.message}")
    p.report(f"asyncapi: {len(messages)} message examples valid against their schemas")

    # Payloads and envelope exactly as the Rust structs serialize.
    p = Problems()
    events = rust_structs(read(ROOT / "libs/contracts/src/events.rs"))
    envelope_structs = rust_structs(read(ROOT / "libs/contracts/src/envelope.rs"))
    # The instance snapshot of InstanceEvent is contracts::api::Instance,
    # with the api.rs structs it uses (its connection).
    api = rust_structs(read(ROOT / "libs/contracts/src/api.rs"))
    api_instance = {name: api[name] for name in referenced_structs(api, "Instance")}
    structs = {**events, **envelope_structs, **api_instance}
    schemas = doc["components"]["schemas"]
    check_structs(p, doc, structs, list(events) + list(envelope_structs) + list(api_instance), skip={"Envelope"})
    env = schemas["Envelope"]["properties"]
    p.check(env["tenant_id"].get("oneOf", [{}])[-1] == {"type": "null"}, "Envelope.tenant_id must be nullable")
    p.check("null" in env["correlation_id"].get("type", []), "Envelope.correlation_id must be nullable")
    p.check(env["payload"].get("type") == "object", "Envelope.payload must be an object")

    kinds = dict(re.findall(r'pub const (\w+): &str = "([^"]+)";', read(ROOT / "libs/contracts/src/events.rs")))
    # Enveloped messages (events.rs) carry the envelope trait; the host-agent
    # protocol's are checked below.
    enveloped = {
        key: m for key, m in messages.items()
        if {"$ref": "#/components/messageTraits/envelope"} in m.get("traits", [])
    }
    by_name = {m["name"]: (key, m) for key, m in enveloped.items()}
    for const, kind in kinds.items():
        if kind not in by_name:
            p.append(f"events.rs {const} = {kind!r} has no message named {kind}")
            continue
        key, message = by_name[kind]
        envelope = resolve(doc, message["payload"]["$ref"])
        overrides = envelope["allOf"][1]["properties"]
        p.check(overrides["type"].get("const") == kind, f"message {key}: type const != {kind}")
        p.check(message["bindings"]["amqp"]["messageType"] == kind, f"message {key}: messageType != {kind}")
        payload_struct = overrides["payload"]["$ref"].rsplit("/", 1)[-1]
        p.check(payload_struct in events, f"message {key}: payload {payload_struct} is no struct in events.rs")
        channels = [c for c in doc["channels"].values() if c["address"] == kind]
        p.check(len(channels) == 1, f"{kind}: expected one routing-key channel, found {len(channels)}")
    p.check(len(kinds) == len(enveloped), f"{len(enveloped)} enveloped messages for {len(kinds)} message types in events.rs")
    p.report(f"asyncapi: envelope and {len(events)} payloads match libs/contracts ({len(kinds)} types)")

    # The host-agent protocol: bodies as contracts/src/agent.rs serializes them; one
    # channel `agent.{machineId}.<kind>` per report kind, and the commands'
    # queue `cmd.{machineId}` (protocol::command_queue).
    p = Problems()
    # The types live in contracts (agent.rs); the queue arguments, which
    # need the AMQP client, in the agent's protocol.rs.
    protocol_src = read(ROOT / "libs/contracts/src/agent.rs") + read(ROOT / "workers/host-agent/src/protocol.rs")
    protocol = rust_structs(read(ROOT / "libs/contracts/src/agent.rs"))
    # A protocol struct that shares its name with one of events.rs
    # (InstanceExited) is documented as Agent<Name>.
    agent_names = {s: f"Agent{s}" for s in protocol if s in events}
    check_structs(p, doc, protocol, list(protocol), schema_names=agent_names)
    agent_kinds = re.findall(r'Kind::\w+ => "(\w+)",', protocol_src)
    kind_enum = re.search(r"pub enum Kind \{(.*?)\n\}", protocol_src, re.S)
    variants = re.findall(r"^\s*(\w+),$", kind_enum.group(1), re.M) if kind_enum else []
    p.check(
        bool(variants) and len(agent_kinds) == len(variants),
        f"protocol.rs: enum Kind has {len(variants)} variants {variants}, parsed report kinds {agent_kinds}",
    )
    channels_by_address = {c["address"]: c for c in doc["channels"].values()}
    agent_messages = {key: m for key, m in messages.items() if key not in enveloped}
    for kind in agent_kinds:
        channel = channels_by_address.get(f"agent.{{machineId}}.{kind}")
        if channel is None:
            p.append(f"agent report kind {kind} has no channel agent.{{machineId}}.{kind}")
            continue
        p.check(channel.get("bindings", {}).get("$ref") == "#/components/channelBindings/agentsExchange", f"agent.{{machineId}}.{kind}: not on the agents exchange")
        for m in channel["messages"].values():
            message = resolve(doc, m["$ref"])
            p.check(message["bindings"]["amqp"]["messageType"] == kind, f"agent.{{machineId}}.{kind}: message type != {kind}")
            p.check(message["payload"]["$ref"].rsplit("/", 1)[-1] in protocol, f"agent.{{machineId}}.{kind}: payload is no struct of protocol.rs")
    command_queue = re.search(r'pub fn command_queue\(machine_id: Uuid\) -> String \{\s*format!\("(\w+)\.\{machine_id\}"\)', protocol_src)
    p.check(command_queue is not None, "protocol.rs: command_queue is not format!(\"<prefix>.{machine_id}\")")
    command_address = f"{command_queue.group(1) if command_queue else 'cmd'}.{{machineId}}"
    host = channels_by_address.get(command_address)
    p.check(host is not None, f"no channel {command_address} (protocol::command_queue)")
    if host:
        payloads = [resolve(doc, m["$ref"])["payload"]["$ref"] for m in host["messages"].values()]
        p.check(payloads == ["#/components/schemas/AgentCommand"], f"{command_address} carries {payloads}, not AgentCommand")
        # The arguments the agent declares it with (protocol::command_queue_arguments).
        def constant(name):
            # `pub const NAME: i64 = 10 * 60 * 1000;`: a product of integers.
            m = re.search(rf"pub const {name}: i64 = ([\d_ *]+);", protocol_src)
            p.check(m is not None, f"protocol.rs: no constant {name}")
            value = 1
            for factor in (m.group(1).replace("_", "").split("*") if m else []):
                value *= int(factor)
            return value
        expected_args = {
            "x-queue-type": "classic",
            "x-queue-version": 2,
            "x-expires": constant("COMMAND_QUEUE_EXPIRES_MS"),
            "x-message-ttl": constant("COMMAND_TTL_MS"),
            "x-max-length": constant("COMMAND_QUEUE_MAX_LENGTH"),
            "x-overflow": "reject-publish",
        }
        for key, value in expected_args.items():
            p.check(f'"{key}"' in protocol_src, f"protocol.rs: command_queue_arguments sets no {key}")
        p.check(
            host.get("x-rabbitmq") == {"arguments": expected_args, "bindings": []},
            f"{command_address}: arguments should be {expected_args}, no bindings (the default exchange routes by name)",
        )
    p.check(len(agent_messages) == len(agent_kinds) + 1, f"{len(agent_messages)} agent messages for {len(agent_kinds)} report kinds and the command")
    p.report(f"asyncapi: host-agent protocol matches workers/host-agent ({len(protocol)} structs, {len(agent_kinds)} report kinds)")

    # Topology as the registry declares it: deploy/topology.json, which a
    # test of src/services.rs keeps equal to every service's and the
    # worker's queues (`Service::queues`) under the default configuration.
    p = Problems()
    topology = json.loads(read(DEPLOY / "topology.json"))
    events_exchange, commands_exchange, dead_letter_exchange, agents_exchange = topology["exchanges"]
    defaults = {
        "events_exchange": events_exchange,
        "commands_exchange": commands_exchange,
        "dead_letter_exchange": dead_letter_exchange,
        "agents_exchange": agents_exchange,
    }
    limit = topology["deliveryLimit"]
    bindings: dict[str, list[dict]] = {q["name"]: q["bindings"] for q in topology["queues"]}
    p.check(len(bindings) == len(topology["queues"]), "deploy/topology.json names a queue twice")
    known_keys = set(kinds.values())
    for queue, keys in bindings.items():
        for b in keys:
            key = b["routingKey"]
            p.check(
                "*" in key or "#" in key or key in known_keys,
                f"{queue}: binding {key} is no message kind of contracts/src/events.rs",
            )
    dlx = defaults["dead_letter_exchange"]
    queues = {
        c["bindings"]["amqp"]["queue"]["name"]: c
        for c in doc["channels"].values()
        if c.get("bindings", {}).get("amqp", {}).get("is") == "queue"
    }
    for queue, expected in bindings.items():
        channel = queues.get(queue)
        if channel is None:
            p.append(f"queue {queue} (declared by the code) has no channel")
            continue
        p.check(channel["address"] == queue, f"queue {queue}: address {channel['address']}")
        rabbit = channel.get("x-rabbitmq", {})
        p.check(
            rabbit.get("bindings") == expected,
            f"queue {queue}: bindings should be {expected}",
        )
        p.check(
            rabbit.get("arguments")
            == {"x-queue-type": "quorum", "x-dead-letter-exchange": dlx, "x-delivery-limit": limit},
            f"queue {queue}: arguments should be quorum, DLX {dlx}, delivery limit {limit}",
        )
    dead = queues.get(f"{dlx}.dead")
    p.check(dead is not None, f"dead-letter queue {dlx}.dead has no channel")
    if dead:
        p.check(
            dead.get("x-rabbitmq") == {"arguments": {"x-queue-type": "quorum"}, "bindings": [{"exchange": dlx, "routingKey": "#"}]},
            f"{dlx}.dead: quorum, bound to {dlx} with #",
        )
    p.check("cmd.{machineId}" in queues, "cmd.{machineId}: no queue channel")
    expected_queues = len(bindings) + 2  # + the dead-letter queue and cmd.{machineId}
    p.check(len(queues) == expected_queues, f"channels declare {len(queues)} queues, the code {expected_queues}")
    exchanges = {
        b["amqp"]["exchange"]["name"]
        for b in doc["components"]["channelBindings"].values()
    }
    p.check(
        exchanges == {defaults["events_exchange"], defaults["commands_exchange"], defaults["agents_exchange"]},
        f"routing-key channels use exchanges {sorted(exchanges)}",
    )
    p.report(f"asyncapi: topology matches the registry's deploy/topology.json ({len(queues)} queues, delivery limit {limit})")

    # Who publishes what: each send operation's title ("catalog publishes
    # catalog.machine.rented", "ordering sends provisioner.jobs.stop",
    # "provisioner workers publish ...") against each service's
    # `publishes()` in deploy/topology.json.
    p = Problems()
    documented = set()
    for name, op in doc["operations"].items():
        if op.get("action") != "send":
            continue
        m = re.match(r"^(\w+)(?: workers?)? (?:publishes|publish|sends) ([\w.]+)$", op.get("title", ""))
        if m:
            documented.add((m.group(1), m.group(2)))
    declared = {(svc, kind) for svc, kinds in topology["publishers"].items() for kind in kinds}
    for svc, kind in sorted(declared - documented):
        p.append(f"{svc} publishes {kind} (its Service::publishes) but no send operation of asyncapi.yaml says so")
    for svc, kind in sorted(documented - declared):
        p.append(f"asyncapi.yaml: {svc} publishes {kind}, which its Service::publishes does not list")
    p.report(f"asyncapi: {len(declared)} published kinds match each service's publishes()")


# ---------------------------------------------------------------- k8s


def load_all(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(read(path)) if d]


def check_k8s() -> None:
    p = Problems()
    kustomization = yaml.safe_load(read(K8S / "kustomization.yaml"))
    listed = kustomization.get("resources", [])
    on_disk = sorted(f.name for f in K8S.glob("*.yaml") if f.name not in ("kustomization.yaml", "secret.template.yaml"))
    for name in listed:
        p.check((K8S / name).is_file(), f"kustomization lists missing {name}")
    for name in on_disk:
        p.check(name in listed, f"{name} is not listed in kustomization.yaml")
    p.check("secret.template.yaml" not in listed, "secret.template.yaml must stay out of kustomization.yaml")
    p.report(f"k8s: kustomization.yaml lists all {len(listed)} manifests")

    objects = []
    for f in sorted(K8S.glob("*.yaml")):
        if f.name != "kustomization.yaml":
            objects += [(f.name, o) for o in load_all(f)]
    by_kind: dict[str, dict[str, dict]] = {}
    for _, o in objects:
        by_kind.setdefault(o["kind"], {})[o["metadata"]["name"]] = o

    p = Problems()
    namespace = kustomization.get("namespace")
    for fname, o in objects:
        if o["kind"] != "Namespace":
            p.check(o["metadata"].get("namespace") == namespace, f"{fname}: {o['kind']}/{o['metadata']['name']} not in {namespace}")
    secrets = {n: set((s.get("stringData") or {}) | (s.get("data") or {})) for n, s in by_kind.get("Secret", {}).items()}
    configmaps = {n: set(c.get("data") or {}) for n, c in by_kind.get("ConfigMap", {}).items()}
    known_env = config_env_names()
    cfg = by_kind["ConfigMap"]["gpumarket-config"]["data"]
    # Every key of the ConfigMap and of a Secret that pods take whole
    # (envFrom) becomes an environment variable: it must be one config.rs reads.
    env_secrets = sorted({
        src["secretRef"]["name"]
        for _, o in objects if o["kind"] in ("Deployment", "Job")
        for c in o["spec"]["template"]["spec"].get("initContainers", []) + o["spec"]["template"]["spec"]["containers"]
        for src in c.get("envFrom", []) if "secretRef" in src
    })
    p.check({"gpumarket-app", "gpumarket-jwt", "gpumarket-stripe"} <= set(env_secrets), f"pods take {env_secrets} whole, expected the app, jwt and stripe Secrets")
    for key in list(cfg) + sorted(k for name in env_secrets for k in secrets.get(name, set())):
        p.check(key in known_env, f"{key} is not read by the platform config or any settings.rs")
        p.check(key != "GPUMARKET_RABBITMQ_MANAGEMENT_URL", f"{key} would reach every pod: mount it from its own Secret where it is read")

    workloads = {**by_kind.get("Deployment", {}), **by_kind.get("Job", {})}
    for wname, w in workloads.items():
        pod = w["spec"]["template"]["spec"]
        for c in pod.get("initContainers", []) + pod["containers"]:
            where = f"{w['kind']}/{wname} container {c['name']}"
            for src in c.get("envFrom", []):
                if "configMapRef" in src:
                    p.check(src["configMapRef"]["name"] in configmaps, f"{where}: no ConfigMap {src['configMapRef']['name']}")
                if "secretRef" in src:
                    p.check(src["secretRef"]["name"] in secrets, f"{where}: no Secret {src['secretRef']['name']}")
            for e in c.get("env", []):
                ref = e.get("valueFrom", {}).get("secretKeyRef")
                if ref:
                    p.check(ref["key"] in secrets.get(ref["name"], set()), f"{where}: no key {ref['key']} in Secret {ref['name']}")
                if e["name"].startswith("GPUMARKET_"):
                    p.check(e["name"] in known_env, f"{where}: {e['name']} is not read by the platform config or any settings.rs")
            args = c.get("args", [])
            if args[:1] == ["serve"] or args == ["worker", "provisioner"]:
                svc = args[1]
                p.check(svc in SERVICES + ["provisioner"], f"{where}: unknown service {svc}")
                port = int(cfg[f"GPUMARKET_{svc.upper()}_PORT"])
                ports = {cp["name"]: cp["containerPort"] for cp in c.get("ports", [])}
                p.check(ports.get("http") == port, f"{where}: http port {ports.get('http')} != GPUMARKET_{svc.upper()}_PORT {port}")
                for probe, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")):
                    p.check(c.get(probe, {}).get("httpGet", {}).get("path") == path, f"{where}: {probe} should GET {path}")
                notes = w["spec"]["template"]["metadata"].get("annotations", {})
                p.check(
                    notes.get("prometheus.io/scrape") == "true" and notes.get("prometheus.io/port") == str(port) and notes.get("prometheus.io/path") == "/metrics",
                    f"{where}: prometheus.io annotations should scrape :{port}/metrics",
                )
                # Mounted one by one, never through a Secret every pod takes
                # whole (checked above): its user can create broker users.
                management = any(e["name"] == "GPUMARKET_RABBITMQ_MANAGEMENT_URL" for e in c.get("env", []))
                needed = svc in MANAGEMENT_API_USERS
                p.check(management == needed, f"{where}: GPUMARKET_RABBITMQ_MANAGEMENT_URL {'missing' if needed else 'set, but ' + svc + ' does not read it'}")
        for v in pod.get("volumes", []):
            if "configMap" in v:
                p.check(v["configMap"]["name"] in configmaps, f"{wname}: volume from missing ConfigMap {v['configMap']['name']}")
    p.report("k8s: every ConfigMap, Secret and key a pod uses exists; env names are ones the config or a settings.rs reads")

    p = Problems()
    deployments = by_kind.get("Deployment", {})

    def pods_matching(selector: dict) -> list[str]:
        return [
            n for n, d in deployments.items()
            if selector.items() <= d["spec"]["template"]["metadata"]["labels"].items()
        ]

    for dname, d in deployments.items():
        sel = d["spec"]["selector"]["matchLabels"]
        p.check(sel.items() <= d["spec"]["template"]["metadata"]["labels"].items(), f"Deployment {dname}: selector does not match its pods")
    services = by_kind.get("Service", {})
    for sname, s in services.items():
        match = pods_matching(s["spec"]["selector"])
        p.check(match == [sname], f"Service {sname} selects {match}")
        if match:
            c = deployments[match[0]]["spec"]["template"]["spec"]["containers"][0]
            ports = {cp["name"]: cp["containerPort"] for cp in c.get("ports", [])}
            for sp in s["spec"]["ports"]:
                p.check(sp["targetPort"] in ports, f"Service {sname}: targetPort {sp['targetPort']} not on the container")
                p.check(sp["port"] == ports.get(sp["targetPort"]), f"Service {sname}: port {sp['port']} != container port")
    for key, value in cfg.items():
        if key.endswith("_URL") and value.startswith("http://"):
            u = urlparse(value)
            s = services.get(u.hostname)
            p.check(s is not None and any(sp["port"] == u.port for sp in s["spec"]["ports"]), f"{key}={value}: no such Service port")
    for iname, ing in by_kind.get("Ingress", {}).items():
        for rule in ing["spec"]["rules"]:
            for path in rule["http"]["paths"]:
                b = path["backend"]["service"]
                s = services.get(b["name"])
                p.check(s is not None and any(sp.get("name") == b["port"].get("name") for sp in s["spec"]["ports"]), f"Ingress {iname}: backend {b} missing")
    p.check(set(by_kind.get("Ingress", {})) <= {"gateway"}, "only the gateway may be exposed")
    p.check(all(s["spec"].get("type", "ClusterIP") == "ClusterIP" for s in services.values()), "Services must be ClusterIP")
    for pname, pdb in by_kind.get("PodDisruptionBudget", {}).items():
        p.check(pods_matching(pdb["spec"]["selector"]["matchLabels"]) == [pname], f"PodDisruptionBudget {pname} matches no single Deployment")
    missing = set(SERVICES) - set(services)
    p.check(not missing, f"no Service for {sorted(missing)}")
    p.check("provisioner" in deployments and "provisioner" not in services, "provisioner: a Deployment and no Service")
    p.report(f"k8s: {len(services)} Services, Ingress and PDBs select existing pods and ports")


# ---------------------------------------------------------------- compose


def check_compose() -> None:
    p = Problems()
    compose = yaml.safe_load(read(DEPLOY / "compose.yaml"))
    services = compose["services"]
    known_env = config_env_names()
    for name, s in services.items():
        for dep in s.get("depends_on", {}):
            p.check(dep in services, f"{name}: depends_on unknown service {dep}")
        if s.get("image") != "gpumarket:latest":
            continue
        env = s.get("environment", {})
        for key in env:
            if key.startswith("GPUMARKET_"):
                p.check(key in known_env, f"{name}: {key} is not read by the platform config or any settings.rs")
        cmd = s.get("command", [])
        if cmd[:1] == ["serve"]:
            svc = cmd[1]
            p.check(svc == name, f"{name}: serves {svc}")
            port = env.get(f"GPUMARKET_{svc.upper()}_PORT")
            p.check(port is not None, f"{name}: no GPUMARKET_{svc.upper()}_PORT")
            test = " ".join(s.get("healthcheck", {}).get("test", []))
            p.check(f"http://127.0.0.1:{port}/readyz" in test, f"{name}: healthcheck should probe :{port}/readyz")
            for key, value in env.items():
                if key.endswith("_URL") and key.startswith("GPUMARKET_") and str(value).startswith("http://") and "@" not in str(value):
                    u = urlparse(value)
                    target = services.get(u.hostname, {}).get("environment", {})
                    p.check(str(target.get(f"GPUMARKET_{u.hostname.upper()}_PORT")) == str(u.port), f"{name}: {key}={value} does not reach {u.hostname}")
    served = {s["command"][1] for s in services.values() if s.get("command", [None])[:1] == ["serve"]}
    p.check(served == set(SERVICES), f"compose serves {sorted(served)}, expected {SERVICES}")
    workers = [(n, s) for n, s in services.items() if s.get("command") == ["worker", "provisioner"]]
    p.check(bool(workers), "no provisioner worker")
    for name, s in workers:
        port = s.get("environment", {}).get("GPUMARKET_PROVISIONER_PORT")
        test = " ".join(s.get("healthcheck", {}).get("test", []))
        p.check(port is not None and f"http://127.0.0.1:{port}/readyz" in test, f"{name}: healthcheck should probe GPUMARKET_PROVISIONER_PORT's /readyz")
    p.check(any(s.get("command") == ["migrate"] for s in services.values()), "no migrate service")
    # The Procfile (split mode without Docker) runs the registry's services too.
    procfile = read(DEPLOY / "local/Procfile")
    listed = re.findall(r"^(\w+): gpumarket serve (\w+)$", procfile, re.M)
    p.check(
        [svc for _, svc in listed] == SERVICES and all(n == svc for n, svc in listed),
        f"deploy/local/Procfile serves {[svc for _, svc in listed]}, expected the registry's {SERVICES} in that order",
    )
    p.report(f"compose: {len(services)} services; env names, ports, URLs and depends_on consistent; Procfile matches the registry")


if __name__ == "__main__":
    checks = {"asyncapi": check_asyncapi, "k8s": check_k8s, "compose": check_compose}
    if len(sys.argv) != 2 or sys.argv[1] not in checks:
        sys.exit(f"usage: {sys.argv[0]} {{{'|'.join(checks)}}}")
    checks[sys.argv[1]]()
