package nameservice

// This file is written by hand, beside the generated code: what every
// client of the nameservice needs and the IDL cannot say.

import (
	"context"
	"errors"
	"strings"
)

// ServiceName is the name under which every monitor exports its
// nameservice: Connect(ctx, d, ServiceName) reaches it.
const ServiceName = "nameservice"

// Names lists every name starting with prefix, sorted, asking for the
// list page by page.
func (c *Client) Names(ctx context.Context, prefix string) ([]string, error) {
	var all []string
	after := ""
	for {
		page, more, err := c.List(ctx, prefix, after)
		if err != nil {
			return all, err
		}
		if len(page) > 0 {
			names := strings.Split(string(page), "\n")
			all = append(all, names...)
			after = names[len(names)-1]
		}
		if !more {
			return all, nil
		}
		if len(page) == 0 {
			return all, errors.New("nameservice: list: an empty page with more to come")
		}
	}
}
