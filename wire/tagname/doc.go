// Package tagname is the rule for a biz_tag's name, the API's, shared by
// segment.ValidateTag (and so allocator's and client's) and the token
// scopes that name tags, so that all say the same thing without the token
// package depending on the allocator.
package tagname
