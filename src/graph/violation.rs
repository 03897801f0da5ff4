//! What a broken graph rule reports: the field and what is wrong, and all of
//! a graph's violations shown within a condition message's room.

use std::fmt;

/// One broken rule: the offending field and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// Field path inside the graph, e.g. `nodes[2].importPath`.
    pub field: String,
    /// What is wrong, naming the offending value.
    pub message: String,
}

impl Violation {
    /// A violation of `field`.
    pub(crate) fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

/// All violations of a graph, in rule order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Violations(pub Vec<Violation>);

/// Bytes of violations [`Violations`] shows before it only counts the rest
/// (a condition message holds 1 KiB; `infergate graph` lists every one).
const SHOWN_MAX: usize = 640;

impl fmt::Display for Violations {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut written = 0;
        for (i, v) in self.0.iter().enumerate() {
            let text = v.to_string();
            if i > 0 && written + text.len() > SHOWN_MAX {
                let rest = self.0.len() - i;
                return write!(
                    f,
                    "; and {rest} more violation{} (infergate graph FILE lists every one)",
                    if rest == 1 { "" } else { "s" }
                );
            }
            if i > 0 {
                f.write_str("; ")?;
            }
            f.write_str(&text)?;
            written += text.len() + 2;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn many_violations_are_counted_not_listed() {
        let many = Violations(
            (0..500)
                .map(|i| Violation::new(format!("nodes[{i}].name"), "x".repeat(40)))
                .collect(),
        );
        let shown = many.to_string();
        assert!(shown.len() < 800, "{}", shown.len());
        assert!(shown.starts_with("nodes[0].name: "), "{shown}");
        let listed = shown.matches(".name: ").count();
        assert!(
            shown.ends_with(&format!(
                "; and {} more violations (infergate graph FILE lists every one)",
                500 - listed
            )),
            "{shown}"
        );
        let one = Violations(vec![Violation::new("ingress", "missing")]);
        assert_eq!(one.to_string(), "ingress: missing");
    }
}
