//! Where in a text file an error is, for `file:line:column` messages: scenario files and
//! subject files both name their errors' places with it.

/// 1-based line and column of byte `offset` in `text` (a column counts characters, not bytes).
pub fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let column = before[line_start..].chars().count() + 1;
    (line, column)
}
