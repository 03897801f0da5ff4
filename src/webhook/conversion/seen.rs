//! A review that repeats a field of its envelope or of an object is
//! refused.

/// The fields of an envelope or an object met so far: a review that
/// repeats one is malformed (readers disagree on which copy counts), and
/// refused.
#[derive(Default)]
pub(super) struct SeenFields(u8);

impl SeenFields {
    pub(super) fn check(&mut self, key: &str, fields: &[&'static str]) -> Result<(), String> {
        let Some(i) = fields.iter().position(|f| *f == key) else {
            return Ok(());
        };
        if self.0 & (1 << i) != 0 {
            return Err(format!("duplicate field `{}`", fields[i]));
        }
        self.0 |= 1 << i;
        Ok(())
    }
}
