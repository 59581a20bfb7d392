//! Placeholders: the KEYS and ARGV templates of a description, filled in per op from the config,
//! the op and the epoch (the table in docs/redis-script.md).
//!
//! Promise: every value is exact to the digits printed, or rounded the way its name says. Integer
//! placeholders are exact integers (times are floored to their unit, as `TIME` truncates); a decimal
//! placeholder with `:ceil` or `:floor` (`{period_ms:ceil}`) is that value rounded up or down to an
//! integer, as a caller that passes whole units computes it. A value that is not an integer where
//! an integer placeholder is used, a rate of zero where an interval is needed, a cost not a multiple
//! of `unit`, a config outside the ones the description says its caller allows, a config or cost
//! integer above the description's `max_integer`, or a time integer above its `max_time`, is
//! [`Unsupported`] (the run is skipped), never a rounded guess. Decimals carry 17 significant digits
//! (enough to round-trip a double), or fewer when that is exact.

/// Why a template cannot be filled for this config or op.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unsupported(pub String);

/// Every placeholder, for validation and docs.
pub const PLACEHOLDERS: [&str; 24] = [
    "key",
    "now_s",
    "now_ms",
    "now_us",
    "now_ns",
    "now_s_decimal",
    "cost",
    "capacity",
    "rate_per_s",
    "rate_per_ms",
    "emission_interval_s",
    "emission_interval_ms",
    "emission_interval_us",
    "emission_interval_ns",
    "whole_emission_interval_ms",
    "period_s",
    "period_ms",
    "period_ns",
    "capacity_times_interval_s",
    "cost_times_interval_s",
    "ttl_s",
    "epoch_s",
    "unit",
    "now_subsec_ns",
];

/// The placeholders that also take `:ceil` and `:floor` (an integer rounded up or down): the
/// decimal ones, and the ns ones that are otherwise an exact integer or unsupported.
pub const ROUNDABLE: [&str; 11] = [
    "rate_per_s",
    "rate_per_ms",
    "emission_interval_s",
    "emission_interval_ms",
    "emission_interval_us",
    "period_s",
    "period_ms",
    "period_ns",
    "capacity_times_interval_s",
    "cost_times_interval_s",
    "emission_interval_ns",
];

/// How a decimal placeholder is given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Rounding {
    /// Exact, or 17 significant digits (`{name}`); integer placeholders are exact integers.
    Exact,
    /// Rounded up to an integer (`{name:ceil}`).
    Ceil,
    /// Rounded down to an integer (`{name:floor}`).
    Floor,
}

/// A placeholder's name and rounding, from the text between its braces.
fn split(placeholder: &str) -> Result<(&str, Rounding), String> {
    match placeholder.split_once(':') {
        None => Ok((placeholder, Rounding::Exact)),
        Some((name, "ceil")) => Ok((name, Rounding::Ceil)),
        Some((name, "floor")) => Ok((name, Rounding::Floor)),
        Some((_, other)) => Err(format!(
            "unknown rounding :{other} in {{{placeholder}}}; known: :ceil, :floor"
        )),
    }
}

/// Checks a template: every `{name}` is a known placeholder, a rounding is on a decimal one, and
/// every brace closes.
pub fn check_template(template: &str) -> Result<(), String> {
    for piece in pieces(template)? {
        let Piece::Placeholder(placeholder) = piece else {
            continue;
        };
        let (name, rounding) = split(placeholder).map_err(|e| format!("{e} in {template:?}"))?;
        if !PLACEHOLDERS.contains(&name) {
            return Err(format!(
                "unknown placeholder {{{name}}} in {template:?}; known: {}",
                PLACEHOLDERS.join(", ")
            ));
        }
        if rounding != Rounding::Exact && !ROUNDABLE.contains(&name) {
            return Err(format!(
                "{{{placeholder}}} in {template:?}: only these placeholders take :ceil or \
                 :floor ({})",
                ROUNDABLE.join(", ")
            ));
        }
    }
    Ok(())
}

enum Piece<'a> {
    Text(&'a str),
    Placeholder(&'a str),
}

fn pieces(template: &str) -> Result<Vec<Piece<'_>>, String> {
    let mut out = Vec::new();
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        out.push(Piece::Text(&rest[..open]));
        let after = &rest[open + 1..];
        let close = after
            .find('}')
            .ok_or_else(|| format!("unclosed {{ in template {template:?}"))?;
        out.push(Piece::Placeholder(&after[..close]));
        rest = &after[close + 1..];
    }
    out.push(Piece::Text(rest));
    Ok(out)
}

/// The config in script units, fixed for one trace.
#[derive(Clone, Debug)]
pub struct Context {
    /// Whole tokens.
    pub capacity: u64,
    /// Tokens per second, `numer / denom` (reduced).
    pub rate_numer: u64,
    /// See `rate_numer`.
    pub rate_denom: u64,
    /// Tokens per script unit.
    pub unit: u64,
    /// Seconds added to every time.
    pub epoch_s: u64,
    /// The largest config or cost integer the script is given (every integer placeholder that is
    /// not a time, a rounded one included).
    pub max_integer: Option<u128>,
    /// The largest time integer the script is given (`{now_s}` .. `{now_ns}`, and the injected
    /// `TIME` in microseconds), in its own unit.
    pub max_time: Option<u128>,
    /// The configs the script's caller allows.
    pub configs: Configs,
}

/// The configs a script's caller can give it (`[script.configs]`); any other is unsupported.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Configs {
    /// The rate is a whole number of tokens per second.
    pub integer_rate: bool,
    /// The capacity is at least the tokens of the rate's period: `p` of a rate of `p` tokens per
    /// `q` seconds, reduced (for a whole rate, its tokens per second).
    pub capacity_at_least_rate: bool,
}

/// One op's values.
#[derive(Clone, Copy, Debug)]
pub struct OpValues<'a> {
    /// The namespaced key.
    pub key: &'a str,
    /// Whole tokens.
    pub cost: u64,
    /// Harness ns.
    pub now: u64,
}

const NS: u128 = 1_000_000_000;

fn unsupported(what: String) -> Unsupported {
    Unsupported(what)
}

impl Context {
    /// Checks what depends only on the config: the capacity is a multiple of `unit`, and the config
    /// is one the script's caller allows.
    pub fn check(&self) -> Result<(), Unsupported> {
        let rate = format!("{}/{} tokens/s", self.rate_numer, self.rate_denom);
        if self.configs.integer_rate && self.rate_denom != 1 {
            return Err(unsupported(format!(
                "a rate of {rate}: the script's caller takes a whole number of tokens per second \
                 ([script.configs] integer_rate)"
            )));
        }
        if self.configs.capacity_at_least_rate && self.capacity < self.rate_numer {
            return Err(unsupported(format!(
                "capacity {} below the {} tokens per {} s of a rate of {rate} ([script.configs] \
                 capacity_at_least_rate)",
                self.capacity, self.rate_numer, self.rate_denom
            )));
        }
        if !self.capacity.is_multiple_of(self.unit) {
            return Err(unsupported(format!(
                "capacity {} is not a multiple of the script's unit {}",
                self.capacity, self.unit
            )));
        }
        Ok(())
    }

    /// Fills `template` for `op`.
    pub fn fill(&self, template: &str, op: OpValues<'_>) -> Result<String, Unsupported> {
        let mut out = String::new();
        for piece in pieces(template).map_err(unsupported)? {
            match piece {
                Piece::Text(text) => out.push_str(text),
                Piece::Placeholder(placeholder) => {
                    let (name, rounding) = split(placeholder).map_err(unsupported)?;
                    out.push_str(&self.value(name, rounding, op)?);
                }
            }
        }
        Ok(out)
    }

    /// A config or cost integer, held to `max_integer`.
    fn integer(&self, name: &str, value: u128) -> Result<String, Unsupported> {
        capped(name, value, self.max_integer, "max_integer")
    }

    /// A time integer, held to `max_time`.
    fn time(&self, name: &str, value: u128) -> Result<String, Unsupported> {
        capped(name, value, self.max_time, "max_time")
    }

    /// `numer / denom`, which must be an integer.
    fn exact_integer(&self, name: &str, numer: u128, denom: u128) -> Result<String, Unsupported> {
        if denom == 0 {
            return Err(unsupported(format!("{{{name}}} needs a rate above zero")));
        }
        if !numer.is_multiple_of(denom) {
            return Err(unsupported(format!(
                "{{{name}}} = {numer}/{denom} is not an integer"
            )));
        }
        self.integer(name, numer / denom)
    }

    fn value(
        &self,
        name: &str,
        rounding: Rounding,
        op: OpValues<'_>,
    ) -> Result<String, Unsupported> {
        let overflow = || unsupported(format!("{{{name}}} overflows 128 bits for this config"));
        let mul = |a: u128, b: u128| a.checked_mul(b).ok_or_else(overflow);
        let (c, p, q, u) = (
            u128::from(self.capacity),
            u128::from(self.rate_numer),
            u128::from(self.rate_denom),
            u128::from(self.unit),
        );
        let now_ns = u128::from(self.epoch_s) * NS + u128::from(op.now);
        let decimal = |numer: u128, denom: u128| {
            if denom == 0 {
                return Err(unsupported(format!("{{{name}}} needs a rate above zero")));
            }
            match rounding {
                Rounding::Exact => Ok(decimal(numer, denom, 17)),
                Rounding::Ceil => self.integer(name, numer.div_ceil(denom)),
                Rounding::Floor => self.integer(name, numer / denom),
            }
        };
        match name {
            "key" => Ok(op.key.to_owned()),
            "now_s" => self.time(name, now_ns / NS),
            "now_ms" => self.time(name, now_ns / 1_000_000),
            "now_us" => self.time(name, now_ns / 1_000),
            "now_ns" => self.time(name, now_ns),
            "now_subsec_ns" => Ok((now_ns % NS).to_string()),
            "now_s_decimal" => Ok(format!("{}.{:09}", now_ns / NS, now_ns % NS)),
            "cost" => self.exact_integer(name, u128::from(op.cost), u),
            "capacity" => self.exact_integer(name, c, u),
            "epoch_s" => self.integer(name, u128::from(self.epoch_s)),
            "unit" => self.integer(name, u),
            // Script units per second: tokens per second / unit.
            "rate_per_s" => decimal(p, mul(q, u)?),
            "rate_per_ms" => decimal(p, mul(mul(q, u)?, 1_000)?),
            // Seconds per script unit: unit / rate.
            "emission_interval_s" => decimal(mul(q, u)?, p),
            "emission_interval_ms" => decimal(mul(mul(q, u)?, 1_000)?, p),
            "emission_interval_us" => decimal(mul(mul(q, u)?, 1_000_000)?, p),
            // Exact integer; rounded with :ceil / :floor.
            "emission_interval_ns" if rounding == Rounding::Exact => {
                self.exact_integer(name, mul(mul(q, u)?, NS)?, p)
            }
            "emission_interval_ns" => decimal(mul(mul(q, u)?, NS)?, p),
            // For scripts that take an interval in whole milliseconds (and would fail on another).
            "whole_emission_interval_ms" => self.exact_integer(name, mul(mul(q, u)?, 1_000)?, p),
            // capacity / rate: the time to refill fully, the GCRA burst offset.
            "period_s" | "capacity_times_interval_s" => decimal(mul(c, q)?, p),
            "period_ms" => decimal(mul(mul(c, q)?, 1_000)?, p),
            "period_ns" if rounding == Rounding::Exact => {
                self.exact_integer(name, mul(mul(c, q)?, NS)?, p)
            }
            "period_ns" => decimal(mul(mul(c, q)?, NS)?, p),
            "cost_times_interval_s" => decimal(mul(u128::from(op.cost), q)?, p),
            "ttl_s" => {
                if p == 0 {
                    return Err(unsupported(format!("{{{name}}} needs a rate above zero")));
                }
                let numer = mul(c, q)?;
                self.integer(name, numer.div_ceil(p).max(1))
            }
            other => Err(unsupported(format!("unknown placeholder {{{other}}}"))),
        }
    }
}

/// `numer / denom` in decimal, exact if it fits in `digits` significant digits, else rounded half
/// up to them (the integer part is always whole).
pub fn decimal(numer: u128, denom: u128, digits: usize) -> String {
    let int = numer / denom;
    let mut rem = numer % denom;
    let int_digits = if int == 0 { 0 } else { int.to_string().len() };
    let mut frac: Vec<u8> = Vec::new();
    let mut significant = int_digits;
    while rem != 0 && significant < digits {
        // rem < denom <= u128::MAX / 10 in practice; widen by splitting if it would overflow.
        let (digit, next) = times_ten_div(rem, denom);
        rem = next;
        frac.push(digit);
        if significant > 0 || digit != 0 {
            significant += 1;
        }
    }
    let mut int = int;
    if rem != 0 {
        // Round half up on the next digit.
        let (next_digit, _) = times_ten_div(rem, denom);
        if next_digit >= 5 {
            let mut carry = true;
            for d in frac.iter_mut().rev() {
                if *d == 9 {
                    *d = 0;
                } else {
                    *d += 1;
                    carry = false;
                    break;
                }
            }
            if carry {
                int += 1;
            }
        }
    }
    while frac.last() == Some(&0) {
        frac.pop();
    }
    if frac.is_empty() {
        return int.to_string();
    }
    let frac: String = frac.iter().map(|d| char::from(b'0' + d)).collect();
    format!("{int}.{frac}")
}

/// `(rem * 10) / denom` and its remainder, for `rem < denom`, without overflow.
fn times_ten_div(rem: u128, denom: u128) -> (u8, u128) {
    match rem.checked_mul(10) {
        Some(scaled) => ((scaled / denom) as u8, scaled % denom),
        None => {
            // Ten additions of rem modulo denom, counting wraps.
            let mut digit = 0u8;
            let mut acc: u128 = 0;
            for _ in 0..10 {
                let room = denom - acc;
                if rem >= room {
                    acc = rem - room;
                    digit += 1;
                } else {
                    acc += rem;
                }
            }
            (digit, acc)
        }
    }
}

/// `value` as the placeholder `{name}`'s text, or unsupported above the description's `cap`
/// (the field `field`).
fn capped(name: &str, value: u128, cap: Option<u128>, field: &str) -> Result<String, Unsupported> {
    match cap {
        Some(max) if value > max => Err(unsupported(format!(
            "{{{name}}} = {value} is above the script's {field} {max}"
        ))),
        _ => Ok(value.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn context() -> Context {
        Context {
            capacity: 10,
            rate_numer: 5,
            rate_denom: 1,
            unit: 1,
            epoch_s: 1_700_000_000,
            max_integer: None,
            max_time: None,
            configs: Configs::default(),
        }
    }

    #[test]
    fn decimals_are_exact_or_seventeen_digits() {
        assert_eq!(decimal(1, 5, 17), "0.2");
        assert_eq!(decimal(2, 3, 17), "0.66666666666666667");
        assert_eq!(decimal(1, 3_000, 17), "0.00033333333333333333");
        assert_eq!(decimal(20, 1, 17), "20");
        assert_eq!(
            decimal(199_999_999_999_999_999, 100, 17),
            "2000000000000000"
        );
        assert_eq!(decimal(u128::MAX - 1, u128::MAX, 3), "1");
        // Round trips through a double: 17 digits are enough.
        let shown = decimal(13, 10, 17);
        assert_eq!(shown.parse::<f64>().unwrap(), 1.3);
    }

    #[test]
    fn placeholders_fill_exactly_or_refuse() {
        let ctx = context();
        let op = OpValues {
            key: "k",
            cost: 3,
            now: 1_500_000_001,
        };
        let fill = |t: &str| ctx.fill(t, op);
        assert_eq!(fill("{key}:{cost}").unwrap(), "k:3");
        assert_eq!(fill("{now_s}").unwrap(), "1700000001");
        assert_eq!(fill("{now_ms}").unwrap(), "1700000001500");
        assert_eq!(fill("{now_ns}").unwrap(), "1700000001500000001");
        assert_eq!(fill("{now_s_decimal}").unwrap(), "1700000001.500000001");
        assert_eq!(fill("{now_subsec_ns}").unwrap(), "500000001");
        assert_eq!(fill("{emission_interval_s}").unwrap(), "0.2");
        assert_eq!(fill("{emission_interval_ns}").unwrap(), "200000000");
        assert_eq!(fill("{whole_emission_interval_ms}").unwrap(), "200");
        assert_eq!(fill("{capacity_times_interval_s}").unwrap(), "2");
        assert_eq!(fill("{cost_times_interval_s}").unwrap(), "0.6");
        assert_eq!(fill("{ttl_s}").unwrap(), "2");
        assert_eq!(fill("{rate_per_ms}").unwrap(), "0.005");
        let zero = Context {
            rate_numer: 0,
            ..context()
        };
        assert!(zero.fill("{emission_interval_s}", op).is_err());
        assert_eq!(zero.fill("{rate_per_s}", op).unwrap(), "0");
        let thirds = Context {
            rate_numer: 3,
            ..context()
        };
        assert!(thirds.fill("{emission_interval_ns}", op).is_err());
        assert!(thirds.fill("{whole_emission_interval_ms}", op).is_err());
        let units = Context {
            unit: 2,
            ..context()
        };
        assert!(units.fill("{cost}", op).is_err());
        assert_eq!(units.fill("{capacity}", op).unwrap(), "5");
        let small = Context {
            max_time: Some(1 << 53),
            ..context()
        };
        assert!(small.fill("{now_ns}", op).is_err());
        assert!(small.fill("{now_us}", op).is_ok());
        // The two caps are apart: a config cap leaves the clock alone, and a clock cap the config.
        let values = Context {
            max_integer: Some(1 << 53),
            ..context()
        };
        assert!(values.fill("{now_ns}", op).is_ok());
        assert!(small.fill("{capacity}", op).is_ok());
        let tiny = Context {
            max_integer: Some(9),
            ..context()
        };
        assert!(tiny.fill("{capacity}", op).is_err());
        assert!(tiny.fill("{now_s}", op).is_ok());
        assert!(check_template("{nope}").is_err());
        assert!(check_template("{key").is_err());
    }

    #[test]
    fn rounded_placeholders_round_as_named() {
        let thirds = Context {
            rate_numer: 3,
            ..context()
        };
        let op = OpValues {
            key: "k",
            cost: 3,
            now: 0,
        };
        let fill = |t: &str| thirds.fill(t, op);
        // 1/3 s per token: 333.33.. ms.
        assert_eq!(
            fill("{emission_interval_ms}").unwrap(),
            "333.33333333333333"
        );
        assert_eq!(fill("{emission_interval_ms:ceil}").unwrap(), "334");
        assert_eq!(fill("{emission_interval_ms:floor}").unwrap(), "333");
        assert_eq!(fill("{emission_interval_ns:ceil}").unwrap(), "333333334");
        assert!(fill("{emission_interval_ns}").is_err(), "exact or refused");
        // 10 tokens at 3/s: 3333.33.. ms to refill.
        assert_eq!(fill("{period_ms:ceil}").unwrap(), "3334");
        assert_eq!(fill("{period_ns:floor}").unwrap(), "3333333333");
        // Whole values are the same either way.
        assert_eq!(context().fill("{period_ms:ceil}", op).unwrap(), "2000");
        assert_eq!(context().fill("{period_ms:floor}", op).unwrap(), "2000");
        let capped = Context {
            max_integer: Some(3_000),
            ..thirds.clone()
        };
        assert!(capped.fill("{period_ms:ceil}", op).is_err());
        let zero = Context {
            rate_numer: 0,
            ..context()
        };
        assert!(zero.fill("{period_ms:ceil}", op).is_err());
        assert!(check_template("{period_ms:ceil}").is_ok());
        assert!(check_template("{period_ms:round}").is_err());
        assert!(check_template("{capacity:ceil}").is_err());
        assert!(check_template("{now_ms:floor}").is_err());
    }

    #[test]
    fn configs_the_caller_does_not_allow_are_unsupported() {
        let allowed = |capacity: u64, numer: u64, denom: u64, configs: Configs| {
            Context {
                capacity,
                rate_numer: numer,
                rate_denom: denom,
                configs,
                ..context()
            }
            .check()
            .is_ok()
        };
        let whole = Configs {
            integer_rate: true,
            ..Configs::default()
        };
        let burst = Configs {
            capacity_at_least_rate: true,
            ..Configs::default()
        };
        assert!(allowed(10, 7, 10, Configs::default()));
        assert!(allowed(10, 5, 1, whole));
        assert!(!allowed(10, 7, 10, whole));
        assert!(allowed(7, 7, 10, burst));
        assert!(
            !allowed(6, 7, 10, burst),
            "7 tokens per 10 s above a burst of 6"
        );
        assert!(allowed(5, 5, 1, burst));
        assert!(!allowed(4, 5, 1, burst));
    }
}
