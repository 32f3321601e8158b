CREATE OR REPLACE FUNCTION ledger.keep_closed_day()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
  -- a proposal may be approved (once) or withdrawn; a closed day is never reopened or edited
  IF OLD.status = 'closed' THEN
    RAISE EXCEPTION USING ERRCODE = 'LD409', MESSAGE = 'day_closed',
      DETAIL = format('%s on the closed day %s is not allowed', TG_OP, OLD.day);
  END IF;
  IF TG_OP = 'DELETE' THEN
    RETURN OLD;
  END IF;
  IF NEW.day <> OLD.day OR NEW.report <> OLD.report OR NEW.chain_head <> OLD.chain_head
     OR NEW.proposed_by <> OLD.proposed_by OR NEW.proposed_at <> OLD.proposed_at THEN
    RAISE EXCEPTION USING ERRCODE = 'LD409', MESSAGE = 'proposal_changed',
      DETAIL = 'a proposal is approved or withdrawn as proposed';
  END IF;
  RETURN NEW;
END $function$;
