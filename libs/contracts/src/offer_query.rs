//! The compact offer query language, in the spirit of Vast.ai's search:
//! space-separated terms `field op value`, e.g.
//!
//! ```text
//! gpu_name=RTX_4090 num_gpus>=2 reliability>0.98 dph<=0.6 country in [US,CA]
//! ```
//!
//! [`parse`] turns a query into an [`OfferSearch`]; a mistake comes back as a
//! [`QueryError`] that names the offending token and its position, and
//! [`render`] draws a caret under it. The CLI parses locally before sending,
//! the server parses again: both use this one function. `docs/cli.md` is the
//! reference of fields, operators and aliases.
//!
//! Pure: no I/O, no allocation beyond the input's size, and no panics on any
//! input (a property test holds it to that).

use std::fmt;
use std::str::FromStr;

use rust_decimal::Decimal;

use crate::api::{OfferSearch, OfferSort, RentalType};

/// A query that does not parse: where, what, and how to fix it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct QueryError {
    /// 0-based offset of the bad token, in characters (not bytes).
    pub position: usize,
    /// The bad token as written (empty when something is missing at the end).
    pub token: String,
    pub message: String,
}

impl fmt::Display for QueryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (at position {})", self.message, self.position)
    }
}

/// The input on one line with a caret line under the bad token, then the
/// message:
///
/// ```text
/// gpu_nme=RTX_4090 dph<=1
/// ^^^^^^^ unknown field `gpu_nme`; did you mean `gpu_name`?
/// ```
pub fn render(input: &str, err: &QueryError) -> String {
    // One display line: newlines and tabs would break the caret's alignment.
    let line: String = input
        .chars()
        .map(|c| if c.is_whitespace() { ' ' } else { c })
        .collect();
    let len = input.chars().count();
    let position = err.position.min(len);
    let width = err
        .token
        .chars()
        .count()
        .clamp(1, len.saturating_sub(position).max(1));
    format!(
        "{line}\n{}{} {}",
        " ".repeat(position),
        "^".repeat(width),
        err.message
    )
}

/// Parses a query into a search. The empty query (or only spaces) is the
/// search without constraints. `first` and `after` are left `None`.
pub fn parse(input: &str) -> Result<OfferSearch, QueryError> {
    Parser {
        chars: input.chars().collect(),
        at: 0,
        search: OfferSearch::default(),
        seen: Vec::new(),
    }
    .run()
}

// ---------------------------------------------------------------- fields

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Eq,
    Ge,
    Gt,
    Le,
    Lt,
    Ne,
    In,
}

impl Op {
    fn as_str(self) -> &'static str {
        match self {
            Op::Eq => "=",
            Op::Ge => ">=",
            Op::Gt => ">",
            Op::Le => "<=",
            Op::Lt => "<",
            Op::Ne => "!=",
            Op::In => "in",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    GpuName,
    NumGpus,
    GpuRam,
    Dph,
    Rental,
    Country,
    Region,
    Datacenter,
    Verified,
    Reliability,
    Cuda,
    Disk,
    InetUp,
    InetDown,
    Storage,
    Mig,
    Order,
}

struct Spec {
    field: Field,
    name: &'static str,
    aliases: &'static [&'static str],
    ops: &'static [Op],
    /// A correct term, shown in messages.
    example: &'static str,
}

const EQ_IN: &[Op] = &[Op::Eq, Op::In];
const EQ: &[Op] = &[Op::Eq];
const GE: &[Op] = &[Op::Ge];
const GE_GT: &[Op] = &[Op::Ge, Op::Gt];

const SPECS: &[Spec] = &[
    Spec {
        field: Field::GpuName,
        name: "gpu_name",
        aliases: &["gpu_model", "gpu"],
        ops: EQ_IN,
        example: "gpu_name=RTX_4090",
    },
    Spec {
        field: Field::NumGpus,
        name: "num_gpus",
        aliases: &["gpu_count", "gpus"],
        ops: &[Op::Eq, Op::Ge],
        example: "num_gpus>=2",
    },
    Spec {
        field: Field::GpuRam,
        name: "gpu_ram",
        aliases: &["vram"],
        ops: GE_GT,
        example: "gpu_ram>=24",
    },
    Spec {
        field: Field::Dph,
        name: "dph",
        aliases: &["price"],
        ops: &[Op::Le, Op::Lt],
        example: "dph<=0.6",
    },
    Spec {
        field: Field::Rental,
        name: "rental",
        aliases: &["type"],
        ops: EQ,
        example: "rental=on_demand",
    },
    Spec {
        field: Field::Country,
        name: "country",
        aliases: &[],
        ops: EQ_IN,
        example: "country in [US,CA]",
    },
    Spec {
        field: Field::Region,
        name: "region",
        aliases: &[],
        ops: EQ_IN,
        example: "region=us-east",
    },
    Spec {
        field: Field::Datacenter,
        name: "datacenter",
        aliases: &[],
        ops: EQ,
        example: "datacenter=true",
    },
    Spec {
        field: Field::Verified,
        name: "verified",
        aliases: &[],
        ops: EQ,
        example: "verified=true",
    },
    Spec {
        field: Field::Reliability,
        name: "reliability",
        aliases: &[],
        ops: GE_GT,
        example: "reliability>=0.98",
    },
    Spec {
        field: Field::Cuda,
        name: "cuda",
        aliases: &["cuda_vers"],
        ops: GE,
        example: "cuda>=12.4",
    },
    Spec {
        field: Field::Disk,
        name: "disk",
        aliases: &["disk_space"],
        ops: GE,
        example: "disk>=500",
    },
    Spec {
        field: Field::InetUp,
        name: "inet_up",
        aliases: &[],
        ops: GE,
        example: "inet_up>=100",
    },
    Spec {
        field: Field::InetDown,
        name: "inet_down",
        aliases: &[],
        ops: GE,
        example: "inet_down>=500",
    },
    Spec {
        field: Field::Storage,
        name: "storage",
        aliases: &[],
        ops: EQ,
        example: "storage=100",
    },
    Spec {
        field: Field::Mig,
        name: "mig",
        aliases: &["mig_profile", "slice"],
        ops: EQ,
        example: "mig=3g.40gb",
    },
    Spec {
        field: Field::Order,
        name: "order",
        aliases: &["sort"],
        ops: EQ,
        example: "order=price_per_tflop",
    },
];

fn lookup(name: &str) -> Option<&'static Spec> {
    SPECS
        .iter()
        .find(|s| s.name == name || s.aliases.contains(&name))
}

/// The known name (field or alias) nearest to `name`, when near enough to be
/// a likely typo.
fn closest(name: &str) -> Option<&'static str> {
    let (best, distance) = SPECS
        .iter()
        .flat_map(|s| std::iter::once(s.name).chain(s.aliases.iter().copied()))
        .map(|known| (known, edit_distance(name, known)))
        .min_by_key(|&(_, d)| d)?;
    let len = name.chars().count();
    let near = distance <= 2 || (distance <= 3 && len >= 8);
    (near && distance < len).then_some(best)
}

/// Levenshtein distance over characters.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = if ca == cb {
                diagonal
            } else {
                1 + diagonal.min(above).min(row[j])
            };
            diagonal = above;
        }
    }
    row[b.len()]
}

fn field_names() -> String {
    SPECS.iter().map(|s| s.name).collect::<Vec<_>>().join(", ")
}

fn ops_list(ops: &[Op]) -> String {
    let quoted: Vec<String> = ops.iter().map(|op| format!("`{}`", op.as_str())).collect();
    match quoted.as_slice() {
        [] => String::new(),
        [one] => one.clone(),
        [init @ .., last] => format!("{} or {last}", init.join(", ")),
    }
}

// ---------------------------------------------------------------- values

/// A value as written: its text (unquoted) and where it stood.
#[derive(Debug, Clone)]
struct Item {
    text: String,
    position: usize,
    quoted: bool,
}

impl Item {
    fn source(&self) -> String {
        if self.quoted {
            format!("\"{}\"", self.text)
        } else {
            self.text.clone()
        }
    }

    fn error(&self, message: impl Into<String>) -> QueryError {
        QueryError {
            position: self.position,
            token: self.source(),
            message: message.into(),
        }
    }
}

#[derive(Debug)]
enum Value {
    One(Item),
    /// `open` is the `[`, `close` just past the `]`.
    List {
        open: usize,
        close: usize,
        items: Vec<Item>,
    },
}

// ---------------------------------------------------------------- parser

struct Parser {
    chars: Vec<char>,
    at: usize,
    search: OfferSearch,
    /// Fields given so far: which, under which name, where.
    seen: Vec<(Field, String, usize)>,
}

fn is_op_char(c: char) -> bool {
    matches!(c, '=' | '<' | '>' | '!')
}

fn is_ident(text: &str) -> bool {
    let mut chars = text.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

impl Parser {
    fn peek(&self) -> Option<char> {
        self.chars.get(self.at).copied()
    }

    fn peek_at(&self, offset: usize) -> Option<char> {
        self.chars.get(self.at + offset).copied()
    }

    fn skip_ws(&mut self) -> bool {
        let start = self.at;
        while self.peek().is_some_and(char::is_whitespace) {
            self.at += 1;
        }
        self.at > start
    }

    fn text(&self, from: usize, to: usize) -> String {
        self.chars
            .get(from..to.min(self.chars.len()))
            .map(|s| s.iter().collect())
            .unwrap_or_default()
    }

    /// The word starting at `from`: up to the next whitespace.
    fn word_at(&self, from: usize) -> String {
        let end = (from..self.chars.len())
            .find(|&i| self.chars[i].is_whitespace())
            .unwrap_or(self.chars.len());
        self.text(from, end)
    }

    fn error(position: usize, token: impl Into<String>, message: impl Into<String>) -> QueryError {
        QueryError {
            position,
            token: token.into(),
            message: message.into(),
        }
    }

    fn run(mut self) -> Result<OfferSearch, QueryError> {
        loop {
            self.skip_ws();
            if self.peek().is_none() {
                return Ok(self.search);
            }
            self.term()?;
            match self.peek() {
                None => {}
                Some(c) if c.is_whitespace() => {}
                Some(c) => {
                    return Err(Self::error(
                        self.at,
                        self.word_at(self.at),
                        format!("unexpected `{c}` after a value; separate terms with a space"),
                    ));
                }
            }
        }
    }

    /// One `field op value`.
    fn term(&mut self) -> Result<(), QueryError> {
        // Field: everything up to whitespace, an operator or a value opener.
        let start = self.at;
        while self
            .peek()
            .is_some_and(|c| !c.is_whitespace() && !is_op_char(c) && c != '[' && c != '"')
        {
            self.at += 1;
        }
        let written = self.text(start, self.at);
        if written.is_empty() {
            let token = self.word_at(start);
            return Err(Self::error(
                start,
                token.clone(),
                format!(
                    "expected a field name before `{token}`, e.g. `gpu_name=RTX_4090`; fields: {}",
                    field_names()
                ),
            ));
        }
        let name = written.to_ascii_lowercase();
        let Some(spec) = lookup(&name) else {
            let message = match closest(&name) {
                Some(known) => format!("unknown field `{written}`; did you mean `{known}`?"),
                None if !is_ident(&written) => format!(
                    "`{written}` is not a field name; a term is `field op value`, e.g. `dph<=0.6`; fields: {}",
                    field_names()
                ),
                None => format!("unknown field `{written}`; fields: {}", field_names()),
            };
            return Err(Self::error(start, written, message));
        };
        if let Some((_, first_name, first_at)) = self.seen.iter().find(|(f, ..)| *f == spec.field) {
            let first = if *first_name == name {
                format!("`{written}` is already given")
            } else {
                format!("`{written}` is the same field as `{first_name}`, given")
            };
            let hint = if spec.ops.contains(&Op::In) {
                format!(
                    "; for several values use one list, e.g. `{} in [A,B]`",
                    spec.name
                )
            } else {
                String::new()
            };
            return Err(Self::error(
                start,
                written.clone(),
                format!("{first} at position {first_at}; give each field once{hint}"),
            ));
        }
        self.seen.push((spec.field, name, start));

        // Operator.
        self.skip_ws();
        let op_at = self.at;
        let op = self.operator(spec, &written, start)?;
        let op_text = self.text(op_at, self.at);
        if !spec.ops.contains(&op) {
            return Err(Self::error(
                op_at,
                op_text.clone(),
                format!(
                    "`{}` does not take `{op_text}`; it takes {}, e.g. `{}`",
                    spec.name,
                    ops_list(spec.ops),
                    spec.example
                ),
            ));
        }

        // Value.
        let had_space = self.skip_ws();
        let missing = || {
            Self::error(
                op_at,
                op_text.clone(),
                format!(
                    "missing value after `{written}{}`, e.g. `{}`",
                    op.as_str(),
                    spec.example
                ),
            )
        };
        let value = match self.peek() {
            None => return Err(missing()),
            Some('[') => self.list()?,
            Some('"') => Value::One(self.quoted()?),
            Some(c @ (']' | ',')) => {
                return Err(Self::error(
                    self.at,
                    c.to_string(),
                    format!(
                        "unexpected `{c}`; expected a value, e.g. `{}`",
                        spec.example
                    ),
                ));
            }
            Some(_) => {
                let item = self.bare(|c| c.is_whitespace());
                // `dph<= reliability>0.9`: the next term, not a value.
                if had_space && looks_like_term(&item.text) {
                    return Err(missing());
                }
                if let Some((offset, c)) = item
                    .text
                    .chars()
                    .enumerate()
                    .find(|&(_, c)| matches!(c, '[' | ']' | '"' | ','))
                {
                    let hint = if c == ',' && spec.ops.contains(&Op::In) {
                        format!("; for several values write `{} in [A,B]`", spec.name)
                    } else if c == '"' {
                        "; quote the whole value, e.g. `gpu_name=\"RTX 4090\"`".to_owned()
                    } else {
                        String::new()
                    };
                    return Err(Self::error(
                        item.position + offset,
                        c.to_string(),
                        format!("unexpected `{c}` in the value `{}`{hint}", item.text),
                    ));
                }
                Value::One(item)
            }
        };
        self.apply(spec, op, &op_text, value)
    }

    fn operator(&mut self, spec: &Spec, written: &str, start: usize) -> Result<Op, QueryError> {
        let two = (self.peek(), self.peek_at(1));
        let (op, len) = match two {
            (Some('>'), Some('=')) => (Op::Ge, 2),
            (Some('<'), Some('=')) => (Op::Le, 2),
            (Some('!'), Some('=')) => (Op::Ne, 2),
            (Some('='), Some('=')) => (Op::Eq, 2),
            (Some('='), _) => (Op::Eq, 1),
            (Some('>'), _) => (Op::Gt, 1),
            (Some('<'), _) => (Op::Lt, 1),
            (Some('i' | 'I'), Some('n' | 'N'))
                if self
                    .peek_at(2)
                    .is_none_or(|c| c.is_whitespace() || c == '[' || c == '"') =>
            {
                (Op::In, 2)
            }
            (None, _) => {
                return Err(Self::error(
                    start,
                    written,
                    format!(
                        "missing operator and value after `{written}`, e.g. `{}`",
                        spec.example
                    ),
                ));
            }
            _ => {
                let token = self.word_at(self.at);
                return Err(Self::error(
                    self.at,
                    token.clone(),
                    format!(
                        "expected an operator after `{written}` ({}), found `{token}`; e.g. `{}`",
                        ops_list(spec.ops),
                        spec.example
                    ),
                ));
            }
        };
        self.at += len;
        Ok(op)
    }

    /// A run of characters up to (not including) one that `stop` accepts.
    fn bare(&mut self, stop: impl Fn(char) -> bool) -> Item {
        let start = self.at;
        while self.peek().is_some_and(|c| !stop(c)) {
            self.at += 1;
        }
        Item {
            text: self.text(start, self.at),
            position: start,
            quoted: false,
        }
    }

    /// `"..."`, taken as is (no escapes).
    fn quoted(&mut self) -> Result<Item, QueryError> {
        let open = self.at;
        self.at += 1;
        let start = self.at;
        while self.peek().is_some_and(|c| c != '"') {
            self.at += 1;
        }
        if self.peek().is_none() {
            return Err(Self::error(
                open,
                self.text(open, self.chars.len()),
                "unterminated `\"`: add a closing `\"`",
            ));
        }
        let text = self.text(start, self.at);
        self.at += 1;
        Ok(Item {
            text,
            position: open,
            quoted: true,
        })
    }

    /// `[a, "b c", d]`: items separated by commas, spaces allowed.
    fn list(&mut self) -> Result<Value, QueryError> {
        let open = self.at;
        self.at += 1;
        let unterminated = |p: &Parser| {
            Self::error(
                open,
                p.word_at(open),
                "unterminated `[`: close the list with `]`, e.g. `[US,CA]`",
            )
        };
        let closes_later = |p: &Parser| p.chars[p.at..].contains(&']');
        let mut items = Vec::new();
        loop {
            self.skip_ws();
            let item = match self.peek() {
                None => return Err(unterminated(self)),
                Some(']') if items.is_empty() => {
                    return Err(Self::error(
                        open,
                        "[]",
                        "empty list; give at least one value, e.g. `[US,CA]`",
                    ));
                }
                Some(c @ (',' | ']')) => {
                    return Err(Self::error(
                        self.at,
                        c.to_string(),
                        "missing value in the list, e.g. `[US,CA]`",
                    ));
                }
                Some('"') => self.quoted()?,
                Some('[') => {
                    return Err(Self::error(
                        self.at,
                        "[",
                        "lists do not nest; write `[A,B]`",
                    ));
                }
                Some(_) => self.bare(|c| c.is_whitespace() || matches!(c, ',' | ']' | '[' | '"')),
            };
            items.push(item);
            self.skip_ws();
            match self.peek() {
                Some(',') => self.at += 1,
                Some(']') => {
                    self.at += 1;
                    return Ok(Value::List {
                        open,
                        close: self.at,
                        items,
                    });
                }
                None => return Err(unterminated(self)),
                Some(_) if !closes_later(self) => return Err(unterminated(self)),
                Some(c) => {
                    return Err(Self::error(
                        self.at,
                        self.word_at(self.at),
                        format!("unexpected `{c}` in the list; separate values with `,`"),
                    ));
                }
            }
        }
    }

    // ------------------------------------------------------------ meaning

    fn apply(
        &mut self,
        spec: &Spec,
        op: Op,
        op_text: &str,
        value: Value,
    ) -> Result<(), QueryError> {
        let items = match value {
            Value::List { open, close, .. } if op != Op::In => {
                return Err(Self::error(
                    open,
                    self.text(open, close),
                    format!(
                        "`{op_text}` takes one value; for a list write `{} in [A,B]`",
                        spec.name
                    ),
                ));
            }
            Value::List { items, .. } => items,
            Value::One(item) if op == Op::In => {
                return Err(Self::error(
                    item.position,
                    item.source(),
                    format!(
                        "`in` takes a list in brackets, e.g. `{} in [{}]`",
                        spec.name,
                        item.source()
                    ),
                ));
            }
            Value::One(item) => vec![item],
        };
        let s = &mut self.search;
        match spec.field {
            Field::GpuName => {
                s.gpu_models = items
                    .iter()
                    .map(|item| {
                        let name = if item.quoted {
                            item.text.trim().to_owned()
                        } else {
                            item.text.replace('_', " ")
                        };
                        not_empty(item, name, spec)
                    })
                    .collect::<Result<_, _>>()?;
            }
            Field::NumGpus => s.gpu_count = Some(integer(single(&items)?, spec, 1)?),
            Field::GpuRam => {
                let item = single(&items)?;
                let gib = integer(item, spec, 0)?;
                // Whole GiB: more than N is at least N + 1.
                let gib = if op == Op::Gt {
                    gib.checked_add(1).ok_or_else(|| {
                        item.error(format!(
                            "out of range: `{}` is at most {}",
                            spec.name,
                            i32::MAX - 1
                        ))
                    })?
                } else {
                    gib
                };
                s.min_vram_gib = Some(gib);
            }
            Field::Dph => s.max_price_per_gpu_hour = Some(decimal(single(&items)?, spec, None)?),
            Field::Rental => {
                let item = single(&items)?;
                s.rental_type = Some(match item.text.to_ascii_lowercase().as_str() {
                    "on_demand" | "on-demand" | "ondemand" => RentalType::OnDemand,
                    "interruptible" => RentalType::Interruptible,
                    _ => {
                        return Err(item.error(format!(
                            "`{}` is not a rental type; use `on_demand` or `interruptible`",
                            item.text
                        )));
                    }
                });
            }
            Field::Country => {
                s.countries = items
                    .iter()
                    .map(|item| {
                        let code = item.text.trim();
                        if code.len() == 2 && code.chars().all(|c| c.is_ascii_alphabetic()) {
                            Ok(code.to_ascii_uppercase())
                        } else {
                            Err(item.error(format!(
                                "`{}` is not a country code; use two letters (ISO 3166-1 alpha-2), e.g. `US`",
                                item.text
                            )))
                        }
                    })
                    .collect::<Result<_, _>>()?;
            }
            Field::Region => {
                s.regions = items
                    .iter()
                    .map(|item| not_empty(item, item.text.trim().to_owned(), spec))
                    .collect::<Result<_, _>>()?;
            }
            Field::Datacenter => s.datacenter_only = Some(boolean(single(&items)?, spec)?),
            Field::Verified => s.verified_only = Some(boolean(single(&items)?, spec)?),
            Field::Reliability => {
                s.min_reliability = Some(decimal(single(&items)?, spec, Some(Decimal::ONE))?);
            }
            Field::Cuda => s.min_cuda_version = Some(cuda_version(single(&items)?)?),
            Field::Disk => s.min_disk_gib = Some(integer(single(&items)?, spec, 0)?),
            Field::InetUp => s.min_upload_mbps = Some(integer(single(&items)?, spec, 0)?),
            Field::InetDown => s.min_download_mbps = Some(integer(single(&items)?, spec, 0)?),
            Field::Storage => s.disk_gib = Some(integer(single(&items)?, spec, 0)?),
            Field::Mig => {
                let item = single(&items)?;
                let profile = item.text.trim();
                crate::mig::check_profile_name(profile).map_err(|_| {
                    item.error(format!(
                        "`{}` is not a MIG profile name; use one such as `3g.40gb`",
                        item.text
                    ))
                })?;
                s.mig_profile = Some(profile.to_owned());
            }
            Field::Order => {
                let item = single(&items)?;
                s.sort = Some(match item.text.to_ascii_lowercase().as_str() {
                    "price" => OfferSort::Price,
                    "price_per_tflop" => OfferSort::PricePerTflop,
                    "reliability" => OfferSort::Reliability,
                    "bandwidth" => OfferSort::Bandwidth,
                    _ => {
                        return Err(item.error(format!(
                            "`{}` is not a sort order; use `price`, `price_per_tflop`, `reliability` or `bandwidth`",
                            item.text
                        )));
                    }
                });
            }
        }
        Ok(())
    }
}

/// `word` followed by an operator: a term, not a value.
fn looks_like_term(text: &str) -> bool {
    let ident_len = text
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .count();
    ident_len > 0
        && text
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && text.chars().nth(ident_len).is_some_and(is_op_char)
}

/// The one item of a non-list value (lists only reach `in` fields).
fn single(items: &[Item]) -> Result<&Item, QueryError> {
    items.first().ok_or_else(|| QueryError {
        position: 0,
        token: String::new(),
        message: "missing value".into(),
    })
}

fn not_empty(item: &Item, text: String, spec: &Spec) -> Result<String, QueryError> {
    if text.trim().is_empty() {
        Err(item.error(format!("empty value; e.g. `{}`", spec.example)))
    } else {
        Ok(text)
    }
}

fn integer(item: &Item, spec: &Spec, min: i32) -> Result<i32, QueryError> {
    let text = item.text.trim();
    let digits = text.strip_prefix('-').unwrap_or(text);
    if digits.is_empty() || !digits.chars().all(|c| c.is_ascii_digit()) {
        return Err(item.error(format!(
            "`{}` is not a whole number; e.g. `{}`",
            item.text, spec.example
        )));
    }
    match text.parse::<i32>() {
        Ok(n) if n >= min => Ok(n),
        Ok(_) => Err(item.error(format!(
            "out of range: `{}` takes a whole number of at least {min}",
            spec.name
        ))),
        Err(_) if text.starts_with('-') => Err(item.error(format!(
            "out of range: `{}` takes a whole number of at least {min}",
            spec.name
        ))),
        Err(_) => Err(item.error(format!(
            "out of range: `{}` is at most {}",
            spec.name,
            i32::MAX
        ))),
    }
}

fn decimal(item: &Item, spec: &Spec, max: Option<Decimal>) -> Result<Decimal, QueryError> {
    let text = item.text.trim();
    let unsigned = text.strip_prefix('-').unwrap_or(text);
    let (whole, fraction) = match unsigned.split_once('.') {
        Some((whole, fraction)) => (whole, Some(fraction)),
        None => (unsigned, None),
    };
    let all_digits = |s: &str| s.chars().all(|c| c.is_ascii_digit());
    let well_formed = match fraction {
        // `0.5` and `.5`, not `5.` nor `.`.
        Some(fraction) => !fraction.is_empty() && all_digits(whole) && all_digits(fraction),
        None => !whole.is_empty() && all_digits(whole),
    };
    if !well_formed {
        return Err(item.error(format!(
            "`{}` is not a decimal number; e.g. `{}`",
            item.text, spec.example
        )));
    }
    let range = match max {
        Some(max) => format!("between 0 and {max}"),
        None => "0 or more".to_owned(),
    };
    let sign = if text.starts_with('-') { "-" } else { "" };
    let whole = if whole.is_empty() { "0" } else { whole };
    let canonical = match fraction {
        Some(fraction) => format!("{sign}{whole}.{fraction}"),
        None => format!("{sign}{whole}"),
    };
    let value = Decimal::from_str(&canonical)
        .map_err(|_| item.error(format!("out of range: `{}` takes {range}", spec.name)))?;
    if (value.is_sign_negative() && !value.is_zero()) || max.is_some_and(|max| value > max) {
        return Err(item.error(format!("out of range: `{}` takes {range}", spec.name)));
    }
    Ok(value)
}

fn boolean(item: &Item, spec: &Spec) -> Result<bool, QueryError> {
    match item.text.trim().to_ascii_lowercase().as_str() {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(item.error(format!(
            "`{}` is not `true` or `false`; e.g. `{}`",
            item.text, spec.example
        ))),
    }
}

/// `major.minor`, normalised (`12.04` → `12.4`).
fn cuda_version(item: &Item) -> Result<String, QueryError> {
    let text = item.text.trim();
    let parsed = text.split_once('.').and_then(|(major, minor)| {
        let ok = |s: &str| !s.is_empty() && s.len() <= 4 && s.chars().all(|c| c.is_ascii_digit());
        if ok(major) && ok(minor) {
            Some((major.parse::<u32>().ok()?, minor.parse::<u32>().ok()?))
        } else {
            None
        }
    });
    match parsed {
        Some((major, minor)) => Ok(format!("{major}.{minor}")),
        None => Err(item.error(format!(
            "`{}` is not a CUDA version; write `major.minor`, e.g. `cuda>=12.4`",
            item.text
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rust_decimal_macros::dec;

    fn ok(q: &str) -> OfferSearch {
        match parse(q) {
            Ok(s) => s,
            Err(e) => panic!("{q:?} should parse:\n{}", render(q, &e)),
        }
    }

    fn err(q: &str) -> QueryError {
        match parse(q) {
            Ok(s) => panic!("{q:?} should not parse, got {s:?}"),
            Err(e) => e,
        }
    }

    /// The error's position and token, and a fragment of its message.
    fn fails(q: &str, position: usize, token: &str, fragment: &str) {
        let e = err(q);
        assert_eq!(
            (e.position, e.token.as_str()),
            (position, token),
            "{q:?}: {}",
            render(q, &e)
        );
        assert!(
            e.message.contains(fragment),
            "{q:?}: {:?} lacks {fragment:?}",
            e.message
        );
    }

    #[test]
    fn the_example_from_the_docs() {
        let s = ok("gpu_name=RTX_4090 num_gpus>=2 reliability>0.98 dph<=0.6 country in [US,CA]");
        assert_eq!(
            s,
            OfferSearch {
                gpu_models: vec!["RTX 4090".into()],
                gpu_count: Some(2),
                min_reliability: Some(dec!(0.98)),
                max_price_per_gpu_hour: Some(dec!(0.6)),
                countries: vec!["US".into(), "CA".into()],
                ..OfferSearch::default()
            }
        );
    }

    #[test]
    fn a_mig_profile_and_its_aliases() {
        for name in ["mig", "mig_profile", "slice"] {
            assert_eq!(
                ok(&format!("{name}=3g.40gb dph<=1.5"))
                    .mig_profile
                    .as_deref(),
                Some("3g.40gb")
            );
        }
        fails("mig=3g;40gb", 4, "3g;40gb", "not a MIG profile name");
    }

    #[test]
    fn empty_and_blank_queries_do_not_constrain() {
        assert_eq!(ok(""), OfferSearch::default());
        assert_eq!(ok("  \t\n "), OfferSearch::default());
    }

    #[test]
    fn gpu_name_and_its_aliases() {
        for name in ["gpu_name", "gpu_model", "gpu", "GPU_NAME"] {
            assert_eq!(ok(&format!("{name}=RTX_4090")).gpu_models, vec!["RTX 4090"]);
        }
        assert_eq!(ok("gpu_name==H100_SXM").gpu_models, vec!["H100 SXM"]);
    }

    #[test]
    fn quoted_values_are_taken_as_is() {
        assert_eq!(ok("gpu_name=\"RTX 4090\"").gpu_models, vec!["RTX 4090"]);
        assert_eq!(ok("gpu_name=\"RTX_4090\"").gpu_models, vec!["RTX_4090"]);
        assert_eq!(ok("gpu = \"A100 80GB\"").gpu_models, vec!["A100 80GB"]);
        assert_eq!(ok("region=\"eu west\"").regions, vec!["eu west"]);
    }

    #[test]
    fn both_list_forms() {
        // Bare items, with or without spaces.
        for q in [
            "gpu_name in [RTX_4090,RTX_3090]",
            "gpu_name in [ RTX_4090 , RTX_3090 ]",
            "gpu_name in[RTX_4090,RTX_3090]",
            "gpu_name IN [RTX_4090,RTX_3090]",
        ] {
            assert_eq!(ok(q).gpu_models, vec!["RTX 4090", "RTX 3090"], "{q}");
        }
        // Quoted items, and a mix.
        assert_eq!(
            ok("gpu_name in [\"RTX 4090\", \"A100 80GB\"]").gpu_models,
            vec!["RTX 4090", "A100 80GB"]
        );
        assert_eq!(
            ok("gpu in [\"RTX 4090\",H100_SXM]").gpu_models,
            vec!["RTX 4090", "H100 SXM"]
        );
        // One-element lists.
        assert_eq!(ok("country in [de]").countries, vec!["DE"]);
        assert_eq!(
            ok("region in [us-east, eu-west]").regions,
            vec!["us-east", "eu-west"]
        );
    }

    #[test]
    fn gpu_count_and_its_aliases() {
        for q in [
            "num_gpus=2",
            "num_gpus>=2",
            "gpu_count=2",
            "gpus>=2",
            "gpus >= 2",
        ] {
            assert_eq!(ok(q).gpu_count, Some(2), "{q}");
        }
    }

    #[test]
    fn vram_greater_than_means_one_more() {
        assert_eq!(ok("gpu_ram>=24").min_vram_gib, Some(24));
        assert_eq!(ok("gpu_ram>24").min_vram_gib, Some(25));
        assert_eq!(ok("vram>=80").min_vram_gib, Some(80));
    }

    #[test]
    fn price_less_than_is_taken_as_at_most() {
        assert_eq!(ok("dph<=0.6").max_price_per_gpu_hour, Some(dec!(0.6)));
        assert_eq!(ok("dph<0.6").max_price_per_gpu_hour, Some(dec!(0.6)));
        assert_eq!(ok("price <= 1").max_price_per_gpu_hour, Some(dec!(1)));
        assert_eq!(ok("dph<=.5").max_price_per_gpu_hour, Some(dec!(0.5)));
        assert_eq!(ok("dph<=0").max_price_per_gpu_hour, Some(dec!(0)));
    }

    #[test]
    fn whitespace_around_operators_is_optional() {
        assert_eq!(ok("dph <= 0.6"), ok("dph<=0.6"));
        assert_eq!(ok("dph<= 0.6"), ok("dph <=0.6"));
        assert_eq!(ok("country in [US,CA]"), ok("country in[US,CA]"));
        assert_eq!(ok("  gpu_name = RTX_4090  "), ok("gpu_name=RTX_4090"));
    }

    #[test]
    fn rental_type() {
        assert_eq!(
            ok("rental=on_demand").rental_type,
            Some(RentalType::OnDemand)
        );
        assert_eq!(
            ok("type=interruptible").rental_type,
            Some(RentalType::Interruptible)
        );
    }

    #[test]
    fn countries_are_upper_cased() {
        assert_eq!(ok("country=us").countries, vec!["US"]);
        assert_eq!(ok("country in [us, Ca]").countries, vec!["US", "CA"]);
        assert_eq!(ok("country=\"DE\"").countries, vec!["DE"]);
    }

    #[test]
    fn region_is_taken_as_written() {
        assert_eq!(ok("region=us-east").regions, vec!["us-east"]);
    }

    #[test]
    fn booleans() {
        let s = ok("datacenter=true verified=false");
        assert_eq!(
            (s.datacenter_only, s.verified_only),
            (Some(true), Some(false))
        );
        assert_eq!(ok("verified=TRUE").verified_only, Some(true));
    }

    #[test]
    fn reliability_is_a_ratio() {
        assert_eq!(ok("reliability>=0.9").min_reliability, Some(dec!(0.9)));
        assert_eq!(ok("reliability>0.98").min_reliability, Some(dec!(0.98)));
        assert_eq!(ok("reliability>=1").min_reliability, Some(dec!(1)));
        assert_eq!(ok("reliability>=0").min_reliability, Some(dec!(0)));
    }

    #[test]
    fn cuda_versions_are_major_minor() {
        assert_eq!(ok("cuda>=12.4").min_cuda_version.as_deref(), Some("12.4"));
        assert_eq!(
            ok("cuda_vers>=11.08").min_cuda_version.as_deref(),
            Some("11.8")
        );
    }

    #[test]
    fn disk_bandwidth_and_storage() {
        let s = ok("disk>=500 inet_up>=100 inet_down>=1000 storage=200");
        assert_eq!(s.min_disk_gib, Some(500));
        assert_eq!(s.min_upload_mbps, Some(100));
        assert_eq!(s.min_download_mbps, Some(1000));
        assert_eq!(s.disk_gib, Some(200));
        assert_eq!(ok("disk_space>=50").min_disk_gib, Some(50));
    }

    #[test]
    fn sort_orders() {
        for (v, sort) in [
            ("price", OfferSort::Price),
            ("price_per_tflop", OfferSort::PricePerTflop),
            ("reliability", OfferSort::Reliability),
            ("bandwidth", OfferSort::Bandwidth),
        ] {
            assert_eq!(ok(&format!("order={v}")).sort, Some(sort));
            assert_eq!(ok(&format!("sort={v}")).sort, Some(sort));
        }
    }

    #[test]
    fn every_field_at_once() {
        let s = ok(concat!(
            "gpu in [RTX_4090,\"RTX 3090\"] gpus=2 vram>20 price<0.5 type=interruptible ",
            "country in [us,ca] region=us-east datacenter=true verified=true reliability>=0.95 ",
            "cuda_vers>=12.2 disk_space>=100 inet_up>=50 inet_down>=200 storage=80 sort=reliability"
        ));
        assert_eq!(
            s,
            OfferSearch {
                mig_profile: None,
                gpu_model: None,
                gpu_models: vec!["RTX 4090".into(), "RTX 3090".into()],
                gpu_count: Some(2),
                min_vram_gib: Some(21),
                max_price_per_gpu_hour: Some(dec!(0.5)),
                rental_type: Some(RentalType::Interruptible),
                countries: vec!["US".into(), "CA".into()],
                regions: vec!["us-east".into()],
                datacenter_only: Some(true),
                verified_only: Some(true),
                min_reliability: Some(dec!(0.95)),
                min_cuda_version: Some("12.2".into()),
                min_disk_gib: Some(100),
                min_upload_mbps: Some(50),
                min_download_mbps: Some(200),
                disk_gib: Some(80),
                sort: Some(OfferSort::Reliability),
                first: None,
                after: None,
            }
        );
    }

    #[test]
    fn unknown_fields_suggest_the_closest_name() {
        fails("gpu_nme=RTX_4090", 0, "gpu_nme", "did you mean `gpu_name`?");
        fails(
            "dph<=1 relability>0.9",
            7,
            "relability",
            "did you mean `reliability`?",
        );
        fails("num_gpu>=2", 0, "num_gpu", "did you mean `num_gpus`?");
        fails("gpu-name=A100", 0, "gpu-name", "did you mean `gpu_name`?");
        // Nothing close: the list of fields.
        fails("colour=red", 0, "colour", "fields: gpu_name, num_gpus");
    }

    #[test]
    fn operators_a_field_does_not_take_list_the_allowed_ones() {
        fails("dph>=0.5", 3, ">=", "it takes `<=` or `<`");
        fails("gpu_name>=RTX_4090", 8, ">=", "it takes `=` or `in`");
        fails("num_gpus<4", 8, "<", "it takes `=` or `>=`");
        fails("cuda=12.4", 4, "=", "it takes `>=`");
        fails("country!=US", 7, "!=", "it takes `=` or `in`");
        fails("dph in [1,2]", 4, "in", "it takes `<=` or `<`");
    }

    #[test]
    fn missing_operators_and_values() {
        fails(
            "gpu_name",
            0,
            "gpu_name",
            "missing operator and value after `gpu_name`",
        );
        fails(
            "dph<=1 gpu ",
            7,
            "gpu",
            "missing operator and value after `gpu`",
        );
        fails(
            "gpu_name RTX_4090",
            9,
            "RTX_4090",
            "expected an operator after `gpu_name`",
        );
        fails("dph<=", 3, "<=", "missing value after `dph<=`");
        fails("dph<=   ", 3, "<=", "missing value after `dph<=`");
        fails(
            "dph<= reliability>0.9",
            3,
            "<=",
            "missing value after `dph<=`",
        );
        fails("=RTX_4090", 0, "=RTX_4090", "expected a field name");
    }

    #[test]
    fn values_that_are_not_numbers() {
        fails("num_gpus>=two", 10, "two", "`two` is not a whole number");
        fails("num_gpus=1.5", 9, "1.5", "not a whole number");
        fails("dph<=cheap", 5, "cheap", "`cheap` is not a decimal number");
        fails("dph<=1e3", 5, "1e3", "not a decimal number");
        fails("reliability>=high", 13, "high", "not a decimal number");
        fails("gpu_ram>=24GB", 9, "24GB", "not a whole number");
        fails("cuda>=12", 6, "12", "not a CUDA version");
        fails("cuda>=12.x", 6, "12.x", "not a CUDA version");
        fails("datacenter=yes", 11, "yes", "not `true` or `false`");
        fails(
            "rental=spot",
            7,
            "spot",
            "use `on_demand` or `interruptible`",
        );
        fails(
            "order=cheapest",
            6,
            "cheapest",
            "`price`, `price_per_tflop`",
        );
        fails("country=USA", 8, "USA", "not a country code");
        fails("country in [US,C1]", 15, "C1", "not a country code");
    }

    #[test]
    fn values_out_of_range() {
        fails("num_gpus>=0", 10, "0", "at least 1");
        fails("num_gpus=-2", 9, "-2", "out of range");
        fails("num_gpus=99999999999", 9, "99999999999", "out of range");
        fails("dph<=-1", 5, "-1", "out of range");
        fails("reliability>=1.5", 13, "1.5", "between 0 and 1");
        fails("gpu_ram>2147483647", 8, "2147483647", "out of range");
        fails("disk>=-5", 6, "-5", "at least 0");
        fails(
            "dph<=99999999999999999999999999999999",
            5,
            "99999999999999999999999999999999",
            "out of range",
        );
    }

    #[test]
    fn unterminated_brackets_and_quotes() {
        fails("country in [US,CA", 11, "[US,CA", "unterminated `[`");
        fails("country in [US, CA dph<=1", 11, "[US,", "unterminated `[`");
        fails("country in [", 11, "[", "unterminated `[`");
        fails("gpu_name=\"RTX 4090", 9, "\"RTX 4090", "unterminated `\"`");
        fails(
            "gpu_name in [\"RTX 4090]",
            13,
            "\"RTX 4090]",
            "unterminated `\"`",
        );
    }

    #[test]
    fn list_mistakes() {
        fails("country in []", 11, "[]", "empty list");
        fails("country in [US,,CA]", 15, ",", "missing value in the list");
        fails("country in [US,]", 15, "]", "missing value in the list");
        fails(
            "country in [US CA] dph<=1",
            15,
            "CA]",
            "separate values with `,`",
        );
        fails(
            "country=[US,CA]",
            8,
            "[US,CA]",
            "for a list write `country in [A,B]`",
        );
        fails("country in US", 11, "US", "`in` takes a list");
        fails("country=US,CA", 10, ",", "`country in [A,B]`");
        fails("country in [[US]]", 12, "[", "lists do not nest");
    }

    #[test]
    fn a_field_given_twice_is_an_error() {
        fails("dph<=1 dph<=2", 7, "dph", "already given at position 0");
        fails(
            "gpu=A100 gpu_name=H100",
            9,
            "gpu_name",
            "`gpu_name` is the same field as `gpu`, given at position 0",
        );
        fails("country=US country=CA", 11, "country", "country in [A,B]");
    }

    #[test]
    fn terms_are_separated_by_spaces() {
        fails(
            "gpu_name=\"RTX 4090\"dph<=1",
            19,
            "dph<=1",
            "separate terms with a space",
        );
        fails(
            "country in [US]dph<=1",
            15,
            "dph<=1",
            "separate terms with a space",
        );
    }

    #[test]
    fn positions_count_characters_not_bytes() {
        // `é` is two bytes: a byte offset would say 14.
        fails("gpu_name=\"é\" cölour=1", 13, "cölour", "not a field name");
    }

    #[test]
    fn render_puts_a_caret_under_the_token() {
        let q = "gpu_nme=RTX_4090 dph<=1";
        assert_eq!(
            render(q, &err(q)),
            "gpu_nme=RTX_4090 dph<=1\n^^^^^^^ unknown field `gpu_nme`; did you mean `gpu_name`?"
        );
        let q = "gpu=A100\tdph<=";
        assert_eq!(
            render(q, &err(q)),
            "gpu=A100 dph<=\n            ^^ missing value after `dph<=`, e.g. `dph<=0.6`"
        );
        let q = "gpu_name";
        assert!(render(q, &err(q)).starts_with("gpu_name\n^^^^^^^^ missing"));
    }

    #[test]
    fn display_includes_the_position() {
        let e = err("dph>=1");
        assert_eq!(
            e.to_string(),
            "`dph` does not take `>=`; it takes `<=` or `<`, e.g. `dph<=0.6` (at position 3)"
        );
    }

    proptest! {
        #[test]
        fn parse_never_panics(input in any::<String>()) {
            if let Err(e) = parse(&input) {
                prop_assert!(e.position <= input.chars().count());
                let _ = render(&input, &e);
            }
        }

        #[test]
        fn parse_never_panics_on_query_like_strings(
            input in r#"[a-z_ ]{0,12}(>=|<=|=|<|>|!=| in | )[\[\]", .0-9a-zA-Z_-]{0,16}( [a-z_]{1,10}[<>=]{1,2}[0-9.\["]{0,6})?"#
        ) {
            if let Err(e) = parse(&input) {
                prop_assert!(e.position <= input.chars().count());
                let _ = render(&input, &e);
            }
        }

        #[test]
        fn valid_prices_round_trip(cents in 0u32..100_000) {
            let price = Decimal::new(i64::from(cents), 2);
            let s = parse(&format!("dph<={price}")).map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(s.max_price_per_gpu_hour, Some(price));
        }
    }
}
