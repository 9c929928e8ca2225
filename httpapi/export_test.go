package httpapi

// RouteIsOpen is, for every route s serves, whether it is open to anyone
// (no rule before its body): tests walk every route through it.
func RouteIsOpen(s *Server) map[string]bool {
	out := map[string]bool{}
	for _, rt := range s.routes() {
		out[rt.pattern] = rt.access.rule == nil
	}
	return out
}
