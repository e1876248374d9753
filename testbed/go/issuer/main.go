// Command issuer is the testbed's OpenID provider: the zitadel/oidc example provider (its
// login pages, device flow and in-memory storage) with the testbed's people and one public
// client that gets JWT access tokens carrying a username and groups.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/zitadel/oidc/v3/example/server/exampleop"
	"github.com/zitadel/oidc/v3/example/server/storage"
	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"
)

// person is one entry of the people file: {"alice": {"password": "...", "groups": ["ml"]}}.
type person struct {
	Password string   `json:"password"`
	Groups   []string `json:"groups"`
}

// people is the provider's user store; a person's ID is their username, so the token's
// subject and preferred_username agree.
type people map[string]person

func (p people) GetUserByID(id string) *storage.User { return p.GetUserByUsername(id) }

func (p people) GetUserByUsername(name string) *storage.User {
	found, ok := p[name]
	if !ok {
		return nil
	}
	return &storage.User{ID: name, Username: name, Password: found.Password, FirstName: name, EmailVerified: true}
}

func (p people) ExampleClientID() string { return storage.ServiceUserID }

// provider adds to the example storage what the controller reads from an access token.
type provider struct {
	*storage.Storage
	people   people
	lifetime time.Duration
}

func (s *provider) GetClientByClientID(ctx context.Context, id string) (op.Client, error) {
	client, err := s.Storage.GetClientByClientID(ctx, id)
	if err != nil {
		return nil, err
	}
	return jwtClient{client}, nil
}

func (s *provider) GetPrivateClaimsFromScopes(_ context.Context, userID, _ string, _ []string) (map[string]any, error) {
	found, ok := s.people[userID]
	if !ok {
		return nil, fmt.Errorf("no person %q", userID)
	}
	groups := found.Groups
	if groups == nil {
		groups = []string{}
	}
	return map[string]any{"preferred_username": userID, "groups": groups}, nil
}

// The access token's expiry is the provider's lifetime, not the example's fixed one, so a
// test can ask for tokens that are already expired.
func (s *provider) CreateAccessToken(ctx context.Context, request op.TokenRequest) (string, time.Time, error) {
	id, _, err := s.Storage.CreateAccessToken(ctx, request)
	return id, time.Now().Add(s.lifetime), err
}

func (s *provider) CreateAccessAndRefreshTokens(ctx context.Context, request op.TokenRequest, current string) (string, string, time.Time, error) {
	id, refresh, _, err := s.Storage.CreateAccessAndRefreshTokens(ctx, request, current)
	return id, refresh, time.Now().Add(s.lifetime), err
}

// jwtClient is the public client (no secret, PKCE or device flow) that hands out JWTs.
type jwtClient struct{ op.Client }

func (jwtClient) AccessTokenType() op.AccessTokenType { return op.AccessTokenTypeJWT }

func (jwtClient) GrantTypes() []oidc.GrantType {
	return []oidc.GrantType{oidc.GrantTypeCode, oidc.GrantTypeRefreshToken, oidc.GrantTypeDeviceCode}
}

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "address to listen on")
	issuer := flag.String("issuer", "", "issuer URL (default: http://<listen address>)")
	peopleFile := flag.String("people", "", "JSON file of people: {name: {password, groups}}")
	clientID := flag.String("client-id", "devbox-cli", "the public client's ID")
	lifetime := flag.Duration("token-lifetime", time.Hour, "access token lifetime (negative: already expired)")
	flag.Parse()

	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	raw, err := os.ReadFile(*peopleFile)
	if err != nil {
		logger.Error("reading the people file", "error", err)
		os.Exit(2)
	}
	var known people
	if err := json.Unmarshal(raw, &known); err != nil {
		logger.Error("parsing the people file", "error", err)
		os.Exit(2)
	}
	listener, err := net.Listen("tcp", *listen)
	if err != nil {
		logger.Error("listening", "error", err)
		os.Exit(2)
	}
	if *issuer == "" {
		*issuer = "http://" + listener.Addr().String()
	}
	// Loopback redirects match on any port (RFC 8252), so `devbox login` may pick its own
	// and a controller on loopback may take the dashboard's sign-in back on its own port.
	storage.RegisterClients(storage.NativeClient(*clientID,
		"http://127.0.0.1/callback", "http://localhost/callback",
		"http://127.0.0.1/dashboard/login/oidc/callback", "http://localhost/dashboard/login/oidc/callback"))
	store := &provider{Storage: storage.NewStorage(known), people: known, lifetime: *lifetime}
	router := exampleop.SetupServer(*issuer, store, logger, false)
	// The parent reads this line to learn the address when it asked for port 0.
	fmt.Printf("listening %s\n", listener.Addr().String())
	if err := http.Serve(listener, router); err != nil {
		logger.Error("serving", "error", err)
		os.Exit(1)
	}
}
