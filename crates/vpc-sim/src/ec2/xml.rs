//! A minimal writer for EC2 response XML.
//!
//! EC2 responses are shallow, element-only documents, so a string builder with escaping is all
//! that is needed; element names follow the SDK's deserializers (lowerCamelCase, sets as
//! `<xxxSet><item>…</item></xxxSet>`).

use std::borrow::Cow;
use std::fmt::Display;

use cloud::Action;

use crate::model::Tags;

/// The XML namespace of EC2 API version 2016-11-15.
pub const NAMESPACE: &str = "http://ec2.amazonaws.com/doc/2016-11-15/";

/// Escapes text for element content.
pub fn escape(s: &str) -> Cow<'_, str> {
    quick_xml::escape::escape(s)
}

/// Builds one response document.
#[derive(Debug, Default)]
pub struct Xml {
    buf: String,
}

impl Xml {
    /// `<{action}Response xmlns=..><requestId>..</requestId>` + `body` + closing tag.
    pub fn response(action: Action, request_id: &str, body: impl FnOnce(&mut Xml)) -> String {
        let mut x = Xml::default();
        x.buf
            .push_str("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
        x.buf
            .push_str(&format!("<{action}Response xmlns=\"{NAMESPACE}\">"));
        x.leaf("requestId", request_id);
        body(&mut x);
        x.buf.push_str(&format!("</{action}Response>"));
        x.buf
    }

    /// `<name>value</name>`.
    pub fn leaf(&mut self, name: &str, value: impl Display) -> &mut Self {
        let text = value.to_string();
        self.buf
            .push_str(&format!("<{name}>{}</{name}>", escape(&text)));
        self
    }

    /// Bare escaped text, for the members of a list of strings (`<item>value</item>`).
    pub fn text(&mut self, value: impl Display) -> &mut Self {
        let text = value.to_string();
        self.buf.push_str(&escape(&text));
        self
    }

    /// `<name>value</name>` when there is a value.
    pub fn leaf_opt(&mut self, name: &str, value: Option<impl Display>) -> &mut Self {
        if let Some(v) = value {
            self.leaf(name, v);
        }
        self
    }

    /// `<name>` + children + `</name>`.
    pub fn node(&mut self, name: &str, children: impl FnOnce(&mut Xml)) -> &mut Self {
        self.buf.push_str(&format!("<{name}>"));
        children(self);
        self.buf.push_str(&format!("</{name}>"));
        self
    }

    /// `<name><item>…</item>…</name>`, one item per element of `items`.
    pub fn set<I: IntoIterator>(
        &mut self,
        name: &str,
        items: I,
        mut each: impl FnMut(&mut Xml, I::Item),
    ) -> &mut Self {
        self.node(name, |x| {
            for item in items {
                x.node("item", |x| each(x, item));
            }
        })
    }

    /// `<tagSet>` of key/value items.
    pub fn tags(&mut self, tags: &Tags) -> &mut Self {
        self.set("tagSet", tags, |x, (k, v)| {
            x.leaf("key", k).leaf("value", v);
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_a_response_with_escaped_text() {
        let doc = Xml::response(Action::CreateTags, "rid-1", |x| {
            x.leaf("return", true);
            x.set("things", ["a<b", "c&d"], |x, s| {
                x.leaf("v", s);
            });
            x.set("strings", ["e>f"], |x, s| {
                x.text(s);
            });
        });
        assert_eq!(
            doc,
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<CreateTagsResponse xmlns=\"http://ec2.amazonaws.com/doc/2016-11-15/\"><requestId>rid-1</requestId><return>true</return><things><item><v>a&lt;b</v></item><item><v>c&amp;d</v></item></things><strings><item>e&gt;f</item></strings></CreateTagsResponse>"
        );
    }
}
