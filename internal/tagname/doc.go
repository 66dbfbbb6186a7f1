// Package tagname is the rule for a biz_tag's name, shared by
// allocator.ValidateTag and the token scopes that name tags, so that both
// say the same thing without the token package depending on the allocator.
package tagname
