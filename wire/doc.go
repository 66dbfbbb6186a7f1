// Package wire holds what idmint's HTTP API and its Go client agree on:
// the JSON bodies of the ID and range endpoints, the error body and its
// stable error codes, and a region's share of the ID space with the
// arithmetic both sides run on it (Share: what a region may grant, and
// whether two regions' shares or a range and a share can be told apart).
// httpapi serves these types (its error table maps every error to one of
// the codes), and the client decodes them and decides on the codes.
//
//	var e wire.ErrorBody
//	if json.Unmarshal(body, &e) == nil && e.Error.Code == wire.CodeUnknownTag {
//		// ...
//	}
package wire
