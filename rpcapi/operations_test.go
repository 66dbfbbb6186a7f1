package rpcapi

import (
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/idmint/idmint/httpapi"
	_ "github.com/idmint/idmint/rpcapi/gen/idmint/v1" // registers the schema
)

// TestOperations_MatchOpenAPI keeps the OpenAPI document and the schema in
// step: every HTTP operation is a procedure of operations (or one of the
// few that are none, said why), and every procedure of proto/idmint/v1 is
// in operations, once.
func TestOperations_MatchOpenAPI(t *testing.T) {
	var doc struct {
		Paths map[string]map[string]any `yaml:"paths"`
	}
	if err := yaml.Unmarshal(httpapi.OpenAPI, &doc); err != nil {
		t.Fatal(err)
	}
	var http []string
	for path, item := range doc.Paths {
		for method := range item {
			if method == "parameters" || method == "summary" || method == "description" {
				continue
			}
			http = append(http, strings.ToUpper(method)+" "+path)
		}
	}
	var mapped []string
	for _, op := range operations {
		mapped = append(mapped, op.method+" "+op.path)
	}
	for op := range notOperations {
		mapped = append(mapped, op)
	}
	slices.Sort(http)
	slices.Sort(mapped)
	for _, op := range http {
		if !slices.Contains(mapped, op) {
			t.Errorf("openapi.yaml has %s, which no procedure maps (add it to the schema and operations, or to notOperations)", op)
		}
	}
	for _, op := range mapped {
		if !slices.Contains(http, op) {
			t.Errorf("operations maps %s, which openapi.yaml lacks", op)
		}
	}

	var procedures []string
	protoregistry.GlobalFiles.RangeFilesByPackage("idmint.v1", func(f protoreflect.FileDescriptor) bool {
		for i := range f.Services().Len() {
			svc := f.Services().Get(i)
			for j := range svc.Methods().Len() {
				procedures = append(procedures, "/"+string(svc.FullName())+"/"+string(svc.Methods().Get(j).Name()))
			}
		}
		return true
	})
	if len(procedures) == 0 {
		t.Fatal("no idmint.v1 service registered")
	}
	seen := map[string]int{}
	for _, op := range operations {
		seen[op.procedure]++
	}
	for _, p := range procedures {
		if seen[p] != 1 {
			t.Errorf("procedure %s is in operations %d times, want once", p, seen[p])
		}
	}
	if len(operations) != len(procedures) {
		t.Errorf("operations has %d rows, the schema %d procedures", len(operations), len(procedures))
	}
}
